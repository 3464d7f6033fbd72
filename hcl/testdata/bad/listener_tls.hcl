# The listener tls block's certificate blocks and client certificate settings.
listener "modes" {
  address = "127.0.0.1:8443"
  tls {
    cert_file           = "testdata/certs/cert.pem"
    key_file            = "testdata/certs/key.pem"
    client_auth         = "optional"
    forward_client_cert = "sometimes"
  }
}

listener "no-ca" {
  address = "127.0.0.1:8444"
  tls {
    cert_file   = "testdata/certs/cert.pem"
    key_file    = "testdata/certs/key.pem"
    client_auth = "require"
  }
}

listener "bad-ca" {
  address = "127.0.0.1:8445"
  tls {
    cert_file      = "testdata/certs/cert.pem"
    key_file       = "testdata/certs/key.pem"
    client_auth    = "request"
    client_ca_file = "testdata/certs/notpem.txt"
  }
}

listener "missing-ca" {
  address = "127.0.0.1:8446"
  tls {
    cert_file      = "testdata/certs/cert.pem"
    key_file       = "testdata/certs/key.pem"
    client_auth    = "require"
    client_ca_file = "testdata/certs/nothere.pem"
  }
}

listener "certificates" {
  address = "127.0.0.1:8447"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
    certificate {
      cert_file = "testdata/certs/nodns.pem"
      key_file  = "testdata/certs/nodns-key.pem"
    }
    certificate {
      cert_file = "testdata/certs/a.test.pem"
    }
    certificate {
      cert_file = "testdata/certs/wildcard.pem"
      key_file  = "testdata/certs/a.test-key.pem"
    }
    certificate {
      cert_file = "testdata/certs/notpem.txt"
      key_file  = "testdata/certs/key.pem"
      extra     = true
    }
  }
}

upstream "web" {
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}
