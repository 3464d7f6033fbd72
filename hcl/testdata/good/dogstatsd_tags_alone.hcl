# dogstatsd_tags without dogstatsd_address: a "No effect" warning at the tags.
telemetry {
  statsd_address = "127.0.0.1:8125" # tags are DogStatsD's: statsd has none
  dogstatsd_tags = ["env:prod"]
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
    address = "127.0.0.1:9443"
  }
}
