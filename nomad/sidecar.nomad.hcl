# impulse-agent as a sidecar: the application task serves plain HTTP/1.1 on
# loopback, impulse-agent terminates HTTP/3 (and HTTP/1.1, HTTP/2 over TLS)
# in front of it in the same group, and Nomad registers the pair in Consul.
#
# Before the first run, store the TLS material and the control API token in
# the job's Nomad variable (a task reads nomad/jobs/<job> without any ACL
# policy of its own):
#
#   nomad var put nomad/jobs/app-with-impulse \
#     cert=@fullchain.pem key=@privkey.pem control_token="$(openssl rand -hex 32)"
#
# and run it with the URLs of both binaries:
#
#   nomad job run -var app_url=... -var impulse_agent_url=... sidecar.nomad.hcl

variable "impulse_agent_url" {
  type        = string
  description = "URL of the static impulse-agent binary (make release); <URL>.sha256 must hold its checksum"
  default     = "https://artifacts.example.internal/impulse-agent/impulse-agent-linux-amd64"
}

variable "app_url" {
  type        = string
  description = "URL of the application binary; it must take -listen=HOST:PORT"
  default     = "https://artifacts.example.internal/app/app-linux-amd64"
}

job "app-with-impulse" {
  group "app" {
    network {
      # Host networking: the application's loopback port is the gateway's
      # loopback too (both tasks share the node's network namespace).
      mode = "host"
      port "https" {}
      port "app" {}
      port "control" {}
    }

    # /v1/ready answers without the control token (status only, no
    # reasons), so the Consul agent runs the check without a secret; every
    # other control endpoint needs the token. The control API listens on
    # the node address because Consul runs the check there.
    service {
      name     = "app-https"
      port     = "https"
      provider = "consul"
      tags     = ["h1", "h2", "h3"]
      check {
        name     = "ready"
        type     = "http"
        port     = "control"
        path     = "/v1/ready"
        interval = "5s"
        timeout  = "2s"
      }
    }

    # The group service leaves Consul shutdown_delay before any task gets
    # its kill signal. Nomad then stops the application first and the
    # sidecar last, so requests still in flight through the gateway reach
    # an application that drains its own.
    shutdown_delay = "5s"

    task "app" {
      driver = "exec"
      config {
        command = "local/app"
        args    = ["-listen=127.0.0.1:${NOMAD_PORT_app}"]
      }
      artifact {
        source      = var.app_url
        mode        = "file"
        destination = "local/app"
      }
      resources {
        cpu    = 500
        memory = 256
      }
    }

    task "impulse-agent" {
      driver = "exec"
      # Started before the application and kept running beside it.
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        command = "local/impulse-agent"
        args    = ["-config=local/gateway.hcl"]
        # Dynamic ports (above 1024): the gateway needs no capability.
        cap_drop = ["all"]
      }
      # The static binary of `make release`, checked against the
      # sha256sum-style file next to it.
      artifact {
        source      = var.impulse_agent_url
        mode        = "file"
        destination = "local/impulse-agent"
        options {
          checksum = "file:${var.impulse_agent_url}.sha256"
        }
      }
      # drain_timeout (25s) < kill_timeout (30s) <= max_kill_timeout
      # (Nomad's default 30s). No Consul: the backend is the application on
      # loopback.
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
          listener "public" {
            address = "{{ env "NOMAD_ADDR_https" }}"
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
      # TLS material and control token from the Nomad variable, into the
      # task's private secrets/ directory; a rotation is picked up by
      # SIGHUP. It never fails open: a key missing from the variable fails
      # the template (error_on_missing_key), and an empty token is refused
      # by the agent.
      template {
        destination          = "secrets/cert.pem"
        change_mode          = "signal"
        change_signal        = "SIGHUP"
        error_on_missing_key = true
        data                 = "{{ with nomadVar \"nomad/jobs/app-with-impulse\" }}{{ .cert }}{{ end }}"
      }
      template {
        destination          = "secrets/key.pem"
        change_mode          = "signal"
        change_signal        = "SIGHUP"
        error_on_missing_key = true
        data                 = "{{ with nomadVar \"nomad/jobs/app-with-impulse\" }}{{ .key }}{{ end }}"
      }
      template {
        destination          = "secrets/control-token"
        change_mode          = "signal"
        change_signal        = "SIGHUP"
        error_on_missing_key = true
        data                 = "{{ with nomadVar \"nomad/jobs/app-with-impulse\" }}{{ .control_token }}{{ end }}"
      }
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"
      resources {
        cpu    = 500
        memory = 128
      }
    }
  }
}
