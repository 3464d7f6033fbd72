# Out-of-range, unknown and mistyped retry and hedge settings; a second
# retry block; a hedge without its delay.
listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "web" {
  route {}
  backend "a" {
    address = "http://127.0.0.1:9000"
  }
  retry {
    attempts              = 0
    on                    = ["connect-failure", "5xx", "reset", "reset", 503]
    per_try_timeout       = "-1s"
    backoff               = "0s"
    max_body_bytes        = -1
    budget_percent        = 120
    min_retry_concurrency = -3
  }
  retry {}
  hedge {
    max = 9
  }
}

upstream "api" {
  route {
    path_prefix = "/api"
  }
  backend "a" {
    address = "http://127.0.0.1:9001"
  }
  retry {
    attempts = 11
    on       = []
    backoff  = "1m"
  }
  hedge {
    delay = "0s"
  }
}

upstream "other" {
  route {
    path_prefix = "/other"
  }
  backend "a" {
    address = "http://127.0.0.1:9002"
  }
  retry {
    on = "reset"
  }
}
