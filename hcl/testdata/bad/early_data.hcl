listener "tcp-only" {
  address    = "127.0.0.1:6450"
  protocols  = ["h1", "h2"]
  early_data = true
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

listener "not-a-bool" {
  address    = "127.0.0.1:6451"
  early_data = "sometimes"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "web" {
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}
