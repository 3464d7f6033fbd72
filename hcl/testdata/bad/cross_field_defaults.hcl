# An invalid field must not make a cross-field check quote a default value
# the user never wrote.
listener "l" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

consul {
  wait          = "0s"
  max_staleness = "1s"
}

upstream "x" {
  load_balancing = "roundrobin"
  hash_on        = "bogus:x"
  route {}
  backend "a" {
    address = "http://127.0.0.1:1"
  }
  health_check {
    interval = "0s"
    timeout  = "10s"
  }
}
