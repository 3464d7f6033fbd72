listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/missing-cert.pem"
    key_file  = "testdata/certs"
  }
}

consul {
  scheme = "https"
  tls {
    ca_file = "testdata/certs/missing-ca.pem"
  }
}

upstream "web" {
  route {}
  backend "a" {
    address = "https://127.0.0.1:8443"
  }
  tls {
    ca_file   = "testdata/certs/ca.pem"
    cert_file = "testdata/certs/cert.pem"
  }
}
