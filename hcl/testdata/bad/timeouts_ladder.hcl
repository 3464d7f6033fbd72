# An inconsistent timeout ladder: a connect or response_header written
# longer than the request timeout could never fire. Defaults longer than it
# (upstream "defaults") are cut short, not errors; body_idle bounds one wait,
# not the exchange.
listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "ladder" {
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
  timeouts {
    connect         = "3s"
    response_header = "1m"
    body_idle       = "5m"
    request         = "2s"
  }
}

upstream "values" {
  route {
    path_prefix = "/v/"
  }
  backend "a" {
    address = "http://127.0.0.1:8081"
  }
  timeouts {
    body_idle = "0s"
    request   = "-1s"
  }
}

upstream "defaults" {
  route {
    path_prefix = "/d/"
  }
  backend "a" {
    address = "http://127.0.0.1:8082"
  }
  timeouts {
    request = "1s"
  }
}

upstream "per-try" {
  route {
    path_prefix = "/per-try/"
  }
  backend "a" {
    address = "http://127.0.0.1:8083"
  }
  timeouts {
    request = "1s"
  }
  retry {
    per_try_timeout = "5s"
  }
}
