# Path normalisation for backends that carry "/" inside a segment as %2F
# (object keys, GitLab-style project paths) and merge slashes themselves.
normalize_path  = true
merge_slashes   = true
escaped_slashes = "keep"

listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "objects" {
  route { path_prefix = "/o/" }
  backend "a" {
    address = "127.0.0.1:9443"
  }
}
