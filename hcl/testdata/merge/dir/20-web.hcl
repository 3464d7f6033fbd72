drain_timeout = "5s"

upstream "web" {
  route {
    host = "Web.Example.com"
  }
  backend "web-1" {
    address = "http://127.0.0.1:8080"
  }
}
