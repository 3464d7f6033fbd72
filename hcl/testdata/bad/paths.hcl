# Path settings with values out of their domain.
normalize_path  = "sometimes"
merge_slashes   = 1
escaped_slashes = "decode"

listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}
