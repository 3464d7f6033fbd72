# impulse-agent as a Consul-registered edge gateway: one instance per client
# node (system job), HTTP/3 on UDP 443, backends discovered from Consul.
# Scale out by adding nodes; put DNS or an L4 (UDP) balancer in front.
# The gateway registers itself in Consul (consul.register) with a TTL check
# that mirrors its readiness, and deregisters before it drains on SIGTERM;
# the control API stays on loopback.
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

    task "impulse-agent" {
      driver = "exec"

      config {
        command = "local/impulse-agent"
        args    = ["-config=local/gateway.hcl"]
      }

      # Build with `make build` and serve bin/impulse-agent from your artifact store.
      artifact {
        source = "https://artifacts.example.internal/impulse-agent/impulse-agent"
        mode   = "file"
        destination = "local/impulse-agent"
      }

      template {
        destination = "local/gateway.hcl"
        change_mode = "signal"
        change_signal = "SIGHUP"
        data = <<-EOT
          drain_timeout = "25s"

          consul {
            address = "{{ env "attr.unique.network.ip-address" }}:8500"
            register {
              service = "impulse-edge"
              tags    = ["h3"]
            }
          }

          control {
            address = "127.0.0.1:{{ env "NOMAD_PORT_control" }}"
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

      # Your TLS material, e.g. from Vault or Nomad variables.
      # A rotated certificate is picked up by a reload, without a restart.
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

      # SIGTERM drains: GOAWAY, in-flight requests finish within drain_timeout.
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      resources {
        cpu    = 1000
        memory = 256
      }
    }
  }
}
