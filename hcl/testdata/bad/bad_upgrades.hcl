listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "ws" {
  route {
    upgrades = ["websocket", "web socket", "spdy/"]
  }
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}

upstream "notalist" {
  route {
    path_prefix = "/x"
    upgrades    = "websocket"
  }
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}
