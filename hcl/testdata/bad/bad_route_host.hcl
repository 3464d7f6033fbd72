listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "web" {
  route {
    host = "api.*.example.com"
  }
  route {
    host = "*"
  }
  route {
    host = "example.com:8443"
  }
  route {
    host = "exa mple.com"
  }
  route {
    host = "**.example.com"
  }
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}
