listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "web" {
  route {}
  consul {
    tags = ["http"]
  }
}

upstream "api" {
  route {
    path_prefix = "/api"
  }
  consul {
    service = ""
    health  = "critical"
    scheme  = "h3"
  }
}
