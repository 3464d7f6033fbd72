# impulse-agent as a sidecar: the application task serves plain HTTP/1.1 on
# loopback, impulse-agent terminates HTTP/3 in front of it in the same group.
job "app-with-impulse" {
  group "app" {
    network {
      port "h3" {}
      port "app" {}
      port "control" {}
    }

    service {
      name     = "app-h3"
      port     = "h3"
      provider = "consul"
      check {
        type     = "http"
        port     = "control"
        path     = "/v1/ready"
        interval = "5s"
        timeout  = "2s"
      }
    }

    task "app" {
      driver = "exec"
      config {
        command = "local/app"
        args    = ["-listen=127.0.0.1:${NOMAD_PORT_app}"]
      }
    }

    task "impulse-agent" {
      driver = "exec"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        command = "local/impulse-agent"
        args    = ["-config=local/gateway.hcl"]
      }
      artifact {
        source      = "https://artifacts.example.internal/impulse-agent/impulse-agent"
        mode        = "file"
        destination = "local/impulse-agent"
      }
      template {
        destination   = "local/gateway.hcl"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = <<-EOT
          control {
            address = "{{ env "NOMAD_ADDR_control" }}"
          }
          listener "h3" {
            address = "{{ env "NOMAD_ADDR_h3" }}"
            tls {
              cert_file = "{{ env "NOMAD_SECRETS_DIR" }}/cert.pem"
              key_file  = "{{ env "NOMAD_SECRETS_DIR" }}/key.pem"
            }
          }
          upstream "app" {
            route {
              path_prefix = "/"
            }
            backend "local" {
              address = "http://127.0.0.1:{{ env "NOMAD_PORT_app" }}"
            }
          }
        EOT
      }
      # secrets/cert.pem and secrets/key.pem: template them as in
      # edge-gateway.nomad.hcl.
      kill_signal  = "SIGTERM"
      kill_timeout = "35s"
      resources {
        cpu    = 500
        memory = 128
      }
    }
  }
}
