# Well-formed values too large (or small) for their field.
drain_timeout = "100000000h"

listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

consul {
  max_staleness = "100000000h"
}

upstream "web" {
  slow_start = "-100000000h"
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
    weight  = 99999999999999999999
  }
  backend "b" {
    address = "http://127.0.0.1:8081"
    weight  = 1000001
  }
  health_check {
    interval            = "100000000h"
    healthy_threshold   = 1e30
    unhealthy_threshold = -5
  }
  outlier_detection {
    consecutive_failures = 3000000000
    base_ejection_time   = "99999999999s"
    max_ejection_percent = 101
  }
  timeouts {
    connect = "9223372036854775808ns"
  }
}
