listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
  proxy_protocol {
    mode = "always"
    udp  = "bogus"
  }
  forwarded_headers {
    trusted = ["127.0.0.1", "10.0.0.0/33"]
  }
  ip_allow = ["not-a-cidr"]
}

listener "quic" {
  address   = "127.0.0.1:9443"
  protocols = ["h3"]
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
  proxy_protocol {
    trusted = ["10.0.0.0/8"]
  }
}

listener "tcponly" {
  address   = "127.0.0.1:9444"
  protocols = ["h1", "h2"]
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
  proxy_protocol {
    trusted = ["10.0.0.0/8"]
    udp     = "v2"
  }
}

upstream "api" {
  route {
    ip_deny = ["::1"]
  }
  backend "a" {
    address = "http://127.0.0.1:9000"
  }
}
