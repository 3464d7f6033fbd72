listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "h1" {
  route {
    path_prefix = "/h1/"
  }
  health_check {
    grpc = true
  }
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
  backend "b" {
    address = "h2c://127.0.0.1:9090"
  }
}

upstream "two-h1" {
  route {
    path_prefix = "/two/"
  }
  health_check {
    grpc         = true
    grpc_service = "pkg.Svc"
  }
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
  backend "b" {
    address = "http://127.0.0.1:8081"
  }
}

upstream "with-path" {
  route {
    path_prefix = "/path/"
  }
  health_check {
    path = "/health"
    grpc = true
  }
  backend "a" {
    address = "h2c://127.0.0.1:9090"
  }
}

upstream "service-only" {
  route {
    path_prefix = "/svc/"
  }
  health_check {
    grpc_service = "pkg.Svc"
  }
  backend "a" {
    address = "https://127.0.0.1:9443"
  }
}

upstream "not-bool" {
  route {
    path_prefix = "/nb/"
  }
  health_check {
    grpc = "maybe"
  }
  backend "a" {
    address = "https://127.0.0.1:9443"
  }
}

upstream "discovered-h1" {
  route {
    path_prefix = "/d/"
  }
  consul {
    service = "grpc"
    scheme  = "http"
  }
  health_check {
    grpc = true
  }
}
