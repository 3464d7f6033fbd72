listener "public" {
  address = "127.0.0.1:6460"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

connect {
  service = "web"
}

upstream "grpc-on-h1" {
  route { path_prefix = "/g/" }
  consul {
    service = "g"
    connect = true
  }
  health_check {
    grpc = true
  }
}
