consul {}
telemetry {}
