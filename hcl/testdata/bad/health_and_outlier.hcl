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
  health_check {
    path                = "health"
    interval            = "1s"
    timeout             = "2s"
    healthy_threshold   = 0
    unhealthy_threshold = -1
  }

  outlier_detection {
    consecutive_failures = 0
    base_ejection_time   = "0s"
    max_ejection_percent = 150
  }
}
