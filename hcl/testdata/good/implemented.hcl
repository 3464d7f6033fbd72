# Features once reported as "Not yet supported" that the gateway implements:
# self-registration, every load-balancing policy, active and passive health.
# None of them may warn.
consul {
  register {
    service = "edge"
    tags    = ["edge"]
  }
}

listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "hashed" {
  load_balancing = "consistent_hash"
  hash_on        = "header:X-User"
  route {
    path_prefix = "/hashed"
  }
  backend "a" {
    address = "https://[::1]:9443"
  }
  health_check {}
  outlier_detection {}
}

upstream "random" {
  load_balancing = "random"
  route {
    path_prefix = "/random"
  }
  backend "a" {
    address = "http://localhost"
  }
}

upstream "least" {
  load_balancing = "least_request"
  route {
    path_prefix = "/least"
  }
  backend "a" {
    address = "http://localhost"
  }
}

upstream "ewma" {
  load_balancing = "ewma"
  route {
    path_prefix = "/ewma"
  }
  backend "a" {
    address = "http://localhost"
  }
}
