listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

consul {
  catalog {
    enabled        = "maybe"
    tag_prefix     = "impulse."
    default_scheme = "h3"
    filter         = "   "
    routes         = []
  }
  catalog {}
}

upstream "consul:web" {
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}
