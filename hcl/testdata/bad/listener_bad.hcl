listener "tcp" {
  address  = "127.0.0.1:8443"
  protocol = "http2"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

listener "any" {
  address = ":8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

listener "noport" {
  address = "127.0.0.1"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

listener "noaddress" {
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

listener "tcp" {
  address = "127.0.0.1:7443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

control {
  address = "localhost"
}

listener "protocols" {
  address   = "127.0.0.1:6443"
  protocols = ["h1", "h4", "h1"]
  alt_svc_port = 70000
  alt_svc_max_age = "0s"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

listener "both" {
  address   = "127.0.0.1:6444"
  protocol  = "http3"
  protocols = []
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

listener "tcp-only" {
  address   = "127.0.0.1:6445"
  protocols = ["h2"]
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

listener "udp-only-same-port" {
  address   = "127.0.0.1:6445"
  protocols = ["h3"]
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

listener "tcp-same-port" {
  address   = "127.0.0.1:6445"
  protocols = ["h1"]
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}
