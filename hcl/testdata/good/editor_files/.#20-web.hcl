upstream "web" {
  route {
