listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "web" {
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
    weight  = 0
  }
  backend "b" {
    address = "http://127.0.0.1:8081"
    weight  = 1.5
  }
  backend "c" {
    address = "http://127.0.0.1:8082"
    weight  = "heavy"
  }
}
