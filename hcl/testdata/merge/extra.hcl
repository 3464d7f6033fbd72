listener "internal" {
  address = "127.0.0.1:9443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "admin" {
  route {
    path_prefix = "/admin"
  }
  consul {
    service = "admin"
  }
}
