listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "web" {
  route {}
  backend "userinfo" {
    address = "http://user:pass@127.0.0.1:8080"
  }
  backend "fragment" {
    address = "https://example.com#top"
  }
  backend "port-zero" {
    address = "example.com:0"
  }
  backend "port-big" {
    address = "example.com:65536"
  }
  backend "port-name" {
    address = "http://example.com:http"
  }
  backend "ipv6-bare" {
    address = "::1"
  }
  backend "scheme" {
    address = "h3://example.com"
  }
  backend "h2c-no-port" {
    address = "h2c://127.0.0.1"
  }
  backend "empty" {
    address = ""
  }
  backend "missing" {
  }
}
