listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

consul {
  address = "consul.example.com"
  wait    = "500ms"
  scheme  = "ftp"
  token   = "secret"
  token_file = "testdata/certs/ca.pem"
}
