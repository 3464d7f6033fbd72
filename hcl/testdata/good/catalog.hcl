# The catalog mode: Consul services opt in with tags and get an upstream each.
listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

consul {
  address = "127.0.0.1:8500"
  catalog {
    enabled        = true
    tag_prefix     = "impulse"
    default_scheme = "http"
    filter         = "ServiceMeta.team == \"shop\""
  }
}

upstream "web" {
  route {
    path_prefix = "/"
  }
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}
