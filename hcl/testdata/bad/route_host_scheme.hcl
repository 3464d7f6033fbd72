# Each invalid host is reported once: no second, false "Duplicate route"
# between the two upstreams.
listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "a" {
  route {
    host = "https://www.example.com"
  }
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}

upstream "b" {
  route {
    host = "http://www.example.com/shop"
  }
  route {
    host = "www.example.com/shop"
  }
  backend "b" {
    address = "http://127.0.0.1:8081"
  }
}
