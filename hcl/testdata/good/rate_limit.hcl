# Rate limits on a listener and on upstreams, every key form.
listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
  rate_limit {
    requests_per_second = 200
    burst               = 400
  }
}

upstream "api" {
  route {
    path_prefix = "/api"
  }
  backend "a" {
    address = "http://127.0.0.1:9000"
  }
  rate_limit {
    requests_per_second = 50
    burst               = 10
    key                 = "client_ip"
  }
}

upstream "partners" {
  route {
    path_prefix = "/partners"
  }
  backend "a" {
    address = "http://127.0.0.1:9000"
  }
  rate_limit {
    requests_per_second = 2.5
    key                 = "header:x-api-key"
  }
}

upstream "reports" {
  route {
    path_prefix = "/reports"
  }
  backend "a" {
    address = "http://127.0.0.1:9000"
  }
  rate_limit {
    requests_per_second = 0.5
    key                 = "route"
  }
}
