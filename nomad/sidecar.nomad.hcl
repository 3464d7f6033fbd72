# impulse-agent as a sidecar: the application task serves plain HTTP/1.1 on
# loopback, impulse-agent terminates HTTP/3 in front of it in the same group.
# The control API listens on the host address so that Consul can run the
# /v1/ready check (it answers without a token, status only); every other
# endpoint, reload included, needs the token from the Nomad variable.
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
          drain_timeout = "25s"
          control {
            address    = "{{ env "NOMAD_ADDR_control" }}"
            token_file = "{{ env "NOMAD_SECRETS_DIR" }}/control-token"
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
      # Never fails open: a missing variable renders an empty file, which
      # the agent refuses.
      template {
        destination   = "secrets/control-token"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = "{{ with nomadVar \"nomad/jobs/app-with-impulse\" }}{{ .control_token }}{{ end }}"
      }
      # secrets/cert.pem and secrets/key.pem: template them as in
      # edge-gateway.nomad.hcl.
      # drain_timeout (25s) < kill_timeout <= max_kill_timeout (Nomad's default 30s).
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"
      resources {
        cpu    = 500
        memory = 128
      }
    }
  }
}
