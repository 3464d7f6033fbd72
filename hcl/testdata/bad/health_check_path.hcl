listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "web" {
  route {
    path_prefix = "/"
  }
  health_check {
    path = "/status#frag"
  }
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}
