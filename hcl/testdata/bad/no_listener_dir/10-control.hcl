control {
  address = "127.0.0.1:9901"
}
