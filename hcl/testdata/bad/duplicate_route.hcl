listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "default" {
  route {
    path_prefix = "/"
  }
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}

upstream "api" {
  route {
    host        = "api.example.com"
    path_prefix = "/v1"
    methods     = ["post", "GET"]
  }
  route {
    path_prefix = "/"
  }
  backend "a" {
    address = "http://127.0.0.1:8081"
  }
}

upstream "api2" {
  route {
    host        = "api.example.com"
    path_prefix = "/v1"
    methods     = ["GET", "POST"]
  }
  route {
    host        = "api.example.com"
    path_prefix = "/v1"
    methods     = ["GET", "get"]
  }
  route {
    host        = "api.example.com"
    path_prefix = "/v1"
    methods     = ["GET"]
  }
  backend "a" {
    address = "http://127.0.0.1:8082"
  }
}
