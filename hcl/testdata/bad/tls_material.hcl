# Every file exists; none holds what its argument needs.
listener "not-pem" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/notpem.txt"
    key_file  = "testdata/certs/key.pem"
  }
}

listener "mismatch" {
  address = "127.0.0.1:8444"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/other-key.pem"
  }
}

listener "swapped" {
  address = "127.0.0.1:8445"
  tls {
    cert_file = "testdata/certs/key.pem"
    key_file  = "testdata/certs/cert.pem"
  }
}

consul {
  scheme = "https"
  tls {
    ca_file = "testdata/certs/notpem.txt"
  }
}

upstream "web" {
  route {}
  backend "a" {
    address = "https://127.0.0.1:9443"
  }
  tls {
    ca_file   = "testdata/certs/key.pem"
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/notpem.txt"
  }
}
