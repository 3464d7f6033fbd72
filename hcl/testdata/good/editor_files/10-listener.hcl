# Only regular *.hcl and *.json files whose name does not start with "." are
# read: the editor files beside this one would not parse.
listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}
