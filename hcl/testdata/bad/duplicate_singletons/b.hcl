log_level = "info"

control {
  address = "127.0.0.1:9902"
}

consul {}
telemetry {}
