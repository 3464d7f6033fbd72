# Certificates outside their validity period load, with a warning each.
listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/expired.pem"
    key_file  = "testdata/certs/expired-key.pem"
  }
}

upstream "web" {
  route {}
  backend "a" {
    address = "https://127.0.0.1:9443"
  }
  tls {
    ca_file   = "testdata/certs/ca.pem"
    cert_file = "testdata/certs/future.pem"
    key_file  = "testdata/certs/future-key.pem"
  }
}
