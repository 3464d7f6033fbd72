# rate_limit: a rate that is not > 0, a missing rate, a burst below 1 or not
# whole, keys of unknown form, a second block, an unknown attribute.
listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
  rate_limit {
    requests_per_second = 0
    burst               = 0
    key                 = "client-ip"
  }
  rate_limit {
    requests_per_second = 5
  }
}

upstream "a" {
  route {}
  backend "a" {
    address = "http://127.0.0.1:9000"
  }
  rate_limit {
    requests_per_second = -1
    burst               = 1.5
    key                 = "header:"
  }
}

upstream "b" {
  route {
    path_prefix = "/b"
  }
  backend "a" {
    address = "http://127.0.0.1:9000"
  }
  rate_limit {
    burst = 10
    key   = "header:Host"
  }
}

upstream "c" {
  route {
    path_prefix = "/c"
  }
  backend "a" {
    address = "http://127.0.0.1:9000"
  }
  rate_limit {
    requests_per_second = "fast"
    key                 = "header:X User"
    max_keys            = 10
  }
}

upstream "d" {
  route {
    path_prefix = "/d"
  }
  backend "a" {
    address = "http://127.0.0.1:9000"
  }
  rate_limit {
    requests_per_second = 2e9
    key                 = "cookie:session"
  }
}
