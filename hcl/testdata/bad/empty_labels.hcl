listener "" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "" {
  route {
    path_prefix = "/a"
  }
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}

upstream "web" {
  route {}
  backend "" {
    address = "http://127.0.0.1:8080"
  }
  backend "  " {
    address = "http://127.0.0.1:8081"
  }
}
