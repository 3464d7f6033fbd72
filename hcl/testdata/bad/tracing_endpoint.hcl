# otlp_endpoint forms that are refused; sample_ratio below 0 and of the wrong type.
tracing {
  otlp_endpoint = "collector:4317/v1/traces"
  sample_ratio  = -0.1
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
