# impulse-agent as a Consul-registered edge gateway: one instance per client
# node (system job), HTTP/3 on UDP 443 and HTTP/1.1 + HTTP/2 on TCP 443,
# backends discovered from Consul. Scale out by adding nodes; put DNS or an
# L4 balancer (TCP and UDP 443) in front.
#
# Nomad registers the gateway in Consul (service "impulse-edge") with
# /v1/ready as its check, and deregisters it shutdown_delay before it sends
# SIGTERM, so Consul stops sending new clients before the listeners drain.
# /v1/ready answers without the control token (status only, no reasons), so
# Consul's check needs no secret; every other endpoint needs the token.
job "impulse-edge" {
  type = "system"

  group "gateway" {
    network {
      port "https" {
        static = 443
      }
      port "control" {
        static = 9901
      }
    }

    service {
      name     = "impulse-edge"
      port     = "https"
      provider = "consul"
      tags     = ["h1", "h2", "h3"]
      meta {
        protocols = "h1,h2,h3"
      }
      check {
        name     = "ready"
        type     = "http"
        port     = "control"
        path     = "/v1/ready"
        interval = "5s"
        timeout  = "2s"
      }
    }

    task "impulse-agent" {
      driver = "exec"

      config {
        command = "local/impulse-agent"
        args    = ["-config=local/gateway.hcl"]
      }

      # Build with `make build` and serve bin/impulse-agent from your artifact store.
      artifact {
        source      = "https://artifacts.example.internal/impulse-agent/impulse-agent"
        mode        = "file"
        destination = "local/impulse-agent"
      }

      # The exec driver shares the host's network: Consul is reached where a
      # default Consul agent listens, 127.0.0.1:8500, or at CONSUL_HTTP_ADDR
      # when the node's environment sets it (no consul.address below).
      template {
        destination   = "local/gateway.hcl"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = <<-EOT
          drain_timeout = "25s"

          consul {
            wait = "5m"
          }

          control {
            address    = "{{ env "NOMAD_ADDR_control" }}"
            token_file = "{{ env "NOMAD_SECRETS_DIR" }}/control-token"
          }

          listener "public" {
            address = "0.0.0.0:{{ env "NOMAD_PORT_https" }}"
            tls {
              cert_file = "{{ env "NOMAD_SECRETS_DIR" }}/cert.pem"
              key_file  = "{{ env "NOMAD_SECRETS_DIR" }}/key.pem"
            }
          }

          upstream "web" {
            route {
              host        = "www.example.com"
              path_prefix = "/"
            }
            consul {
              service = "web"
              scheme  = "http"
            }
          }
        EOT
      }

      # Your TLS material and control token, e.g. from Vault or Nomad
      # variables. A rotated certificate or token is picked up by a reload,
      # without a restart; an empty token file is refused (never fails open).
      template {
        destination   = "secrets/cert.pem"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = "{{ with nomadVar \"nomad/jobs/impulse-edge\" }}{{ .cert }}{{ end }}"
      }
      template {
        destination   = "secrets/key.pem"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = "{{ with nomadVar \"nomad/jobs/impulse-edge\" }}{{ .key }}{{ end }}"
      }
      template {
        destination   = "secrets/control-token"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = "{{ with nomadVar \"nomad/jobs/impulse-edge\" }}{{ .control_token }}{{ end }}"
      }

      # Consul stops routing here before SIGTERM; SIGTERM then drains
      # (GOAWAY, in-flight requests finish within drain_timeout, 25s).
      # kill_timeout stays within the client's max_kill_timeout (default 30s).
      shutdown_delay = "5s"
      kill_signal    = "SIGTERM"
      kill_timeout   = "30s"

      resources {
        cpu    = 1000
        memory = 256
      }
    }
  }
}
