log_level = "info"
log_level = "debug"
