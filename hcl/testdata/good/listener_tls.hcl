# Certificates chosen by SNI and client certificates; settings that cannot
# take effect warn.
listener "mtls" {
  address = "127.0.0.1:8443"
  tls {
    cert_file           = "testdata/certs/cert.pem"
    key_file            = "testdata/certs/key.pem"
    client_auth         = "require"
    client_ca_file      = "testdata/certs/ca.pem"
    forward_client_cert = true
    certificate {
      cert_file = "testdata/certs/a.test.pem"
      key_file  = "testdata/certs/a.test-key.pem"
    }
    certificate {
      cert_file = "testdata/certs/wildcard.pem"
      key_file  = "testdata/certs/wildcard-key.pem"
    }
  }
}

listener "unused" {
  address = "127.0.0.1:8444"
  tls {
    cert_file           = "testdata/certs/cert.pem"
    key_file            = "testdata/certs/key.pem"
    client_ca_file      = "testdata/certs/ca.pem"
    forward_client_cert = true
  }
}

upstream "web" {
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}
