# A file cut short before its listener block: a reload to it must be
# refused, not stop every listener.
upstream "web" {
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}
