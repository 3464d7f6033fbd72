# Bad tracing blocks: a missing endpoint, a ratio outside 0..1, an unknown
# protocol, a path with gRPC, an empty service name; a second block.
tracing {
  protocol     = "thrift"
  sample_ratio = 1.5
  service_name = " "
}

tracing {
  otlp_endpoint = "127.0.0.1:4317"
}

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
    address = "http://127.0.0.1:8080"
  }
}
