control {
  address    = "127.0.0.1:9901"
  token_file = "testdata/multiline.token"
}

listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}
