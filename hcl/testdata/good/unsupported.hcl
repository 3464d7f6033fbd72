# Every setting that is accepted but not yet supported by the gateway: each
# gets a "Not yet supported" warning at its value.
telemetry {
  statsd_address    = "127.0.0.1:8125" # supported: no warning
  dogstatsd_address = "127.0.0.1:8126" # supported: no warning
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
    address = "http://localhost"
  }
}
