# Concurrency limits: negative counts, a queue without max_requests or
# without queue_timeout, a queue_timeout without a queue, a zero timeout;
# a negative top-level max_requests and a second top-level limits block.
limits {
  max_requests = -3
}
limits {}

listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "negative" {
  route { path_prefix = "/n" }
  backend "a" { address = "http://127.0.0.1:9000" }
  limits {
    max_requests             = -1
    max_requests_per_backend = -2
    max_queue                = -4
  }
}

upstream "queue_no_limit" {
  route { path_prefix = "/q" }
  backend "a" { address = "http://127.0.0.1:9000" }
  limits {
    max_queue     = 10
    queue_timeout = "1s"
  }
}

upstream "queue_no_timeout" {
  route { path_prefix = "/t" }
  backend "a" { address = "http://127.0.0.1:9000" }
  limits {
    max_requests = 5
    max_queue    = 10
  }
}

upstream "timeout_no_queue" {
  route { path_prefix = "/o" }
  backend "a" { address = "http://127.0.0.1:9000" }
  limits {
    max_requests  = 5
    queue_timeout = "2s"
  }
}

upstream "zero_timeout" {
  route { path_prefix = "/z" }
  backend "a" { address = "http://127.0.0.1:9000" }
  limits {
    max_requests  = 5
    max_queue     = 10
    queue_timeout = "0s"
  }
}
