listener "public" {
  address = "127.0.0.1:8443"
}

listener "half" {
  address = "127.0.0.1:9443"
  tls {
    cert_file = "testdata/certs/cert.pem"
  }
}

upstream "web" {
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}
