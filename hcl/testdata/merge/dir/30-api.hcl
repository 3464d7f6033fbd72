upstream "api" {
  route {
    host        = "*.api.example.com"
    path_prefix = "/v1/"
    methods     = ["GET", "POST"]
  }
  backend "api-1" {
    address = "api.internal:9443"
    weight  = 3
  }
}
