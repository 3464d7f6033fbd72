# Out-of-range and mistyped limits; a second limits block.
listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
  limits {
    max_header_bytes       = 100
    max_uri_bytes          = 2000000
    max_request_body_bytes = -1
    read_header_timeout    = "0s"
    client_body_timeout    = "soon"
    idle_timeout           = 120
    max_connections        = 1.5
    max_concurrent_streams = 0
  }
  limits {}
}

upstream "web" {
  route {}
  backend "a" {
    address = "http://127.0.0.1:9000"
  }
  limits {
    max_request_body_bytes = -5
    max_requests           = -1
    queue_timeout          = "never"
    max_rps                = 5
  }
}
