listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

telemetry {
  dogstatsd_address = "127.0.0.1"
  dogstatsd_tags    = ["env:prod", "team|web", "", "region #1", ":x"]
}
