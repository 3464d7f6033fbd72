# An access log in a directory that does not exist, a bad format, a
# mistyped include_query; a second access_log block.
access_log {
  path          = "testdata/no-such-directory/access.log"
  format        = "clf"
  include_query = "sometimes"
}

access_log {
  path = "testdata"
}

listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}
