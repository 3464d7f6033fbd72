# Listener limits with every attribute, an upstream's own body limit and
# every concurrency limit (upstream and top-level).
limits {
  max_requests = 5000
}

listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
  limits {
    max_header_bytes       = 32768
    max_uri_bytes          = 4096
    max_request_body_bytes = 10485760
    read_header_timeout    = "5s"
    client_body_timeout    = "30s"
    idle_timeout           = "90s"
    max_connections        = 10000
    max_concurrent_streams = 100
  }
}

upstream "uploads" {
  route {
    path_prefix = "/upload"
  }
  backend "a" {
    address = "http://127.0.0.1:9000"
  }
  limits {
    max_request_body_bytes   = 1073741824
    max_requests             = 100
    max_requests_per_backend = 10
    max_queue                = 50
    queue_timeout            = "1s"
  }
}
