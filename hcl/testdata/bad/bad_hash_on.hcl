listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "no-key" {
  load_balancing = "consistent_hash"
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}

upstream "bad-key" {
  load_balancing = "consistent_hash"
  hash_on        = "body"
  route {
    path_prefix = "/bad-key"
  }
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}

upstream "wrong-policy" {
  hash_on = "client_ip"
  route {
    path_prefix = "/wrong-policy"
  }
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}
