# Who is calling: PROXY protocol, trusted forwarders, IP rules.
listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
  proxy_protocol {
    trusted = ["10.0.0.0/8", "2001:db8::/32"]
    udp     = "spp"
  }
  forwarded_headers {
    trusted = ["127.0.0.1/32"]
  }
  ip_deny = ["192.0.2.0/24"]
}

listener "inner" {
  address   = "127.0.0.1:9443"
  protocols = ["h1", "h2"]
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
  proxy_protocol {
    trusted = ["10.1.0.0/16"]
    mode    = "optional"
  }
  forwarded_headers {}
}

listener "quic" {
  address   = "127.0.0.1:9444"
  protocols = ["h3"]
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
  proxy_protocol {
    trusted = ["10.2.0.0/16"]
    udp     = "v2"
  }
}

upstream "api" {
  route {
    path_prefix = "/internal"
    ip_allow    = ["10.0.0.0/8"]
    ip_deny     = ["10.9.0.0/16"]
  }
  backend "a" {
    address = "http://127.0.0.1:9000"
  }
}
