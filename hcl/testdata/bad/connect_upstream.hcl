listener "public" {
  address = "127.0.0.1:6460"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "db" {
  route {}
  consul {
    service = "db"
    connect = true
    scheme  = "https"
  }
  backend "static" {
    address = "http://127.0.0.1:8080"
  }
  tls {}
}

upstream "cache" {
  route { path_prefix = "/cache/" }
  consul {
    service  = "cache"
    protocol = "http2"
  }
}

upstream "rpc" {
  route { path_prefix = "/rpc/" }
  consul {
    service  = "rpc"
    connect  = true
    protocol = "tcp"
  }
}
