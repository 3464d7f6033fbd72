# impulse-agent as a Consul-registered edge gateway: one instance per client
# node (system job), HTTP/3 on UDP 443 and HTTP/1.1 + HTTP/2 on TCP 443,
# backends discovered from Consul. Scale out by adding nodes; put DNS or an
# L4 balancer (TCP and UDP 443) in front.
#
# Before the first run, store the TLS material and the control API token in
# the job's Nomad variable (a task reads nomad/jobs/<job> without any ACL
# policy of its own):
#
#   nomad var put nomad/jobs/impulse-edge \
#     cert=@fullchain.pem key=@privkey.pem control_token="$(openssl rand -hex 32)"
#
# and serve the binary built by `make release` (bin/release/impulse-agent-linux-amd64
# and its .sha256) from your artifact store:
#
#   nomad job run -var impulse_agent_url=https://artifacts.example.internal/impulse-agent/v0.1.0/impulse-agent-linux-amd64 edge-gateway.nomad.hcl

variable "impulse_agent_url" {
  type        = string
  description = "URL of the static impulse-agent binary (make release); <URL>.sha256 must hold its checksum"
  default     = "https://artifacts.example.internal/impulse-agent/impulse-agent-linux-amd64"
}

job "impulse-edge" {
  type = "system"

  group "gateway" {
    network {
      # Host networking: the listeners bind the node's own addresses, and
      # 127.0.0.1 is the node's loopback, where a default Consul agent
      # listens (client_addr 127.0.0.1, port 8500).
      mode = "host"
      port "https" {
        static = 443
      }
      port "control" {
        static = 9901
      }
    }

    # Nomad registers the gateway in Consul (service "impulse-edge") with
    # /v1/ready as its check. /v1/ready is the one control endpoint that
    # answers without the control token (status only, no reasons), so the
    # Consul agent runs this check without a secret while every other
    # endpoint, /v1/reload and /metrics included, needs the token. (The
    # alternative, consul { register {} } in gateway.hcl, has the agent
    # register itself with a TTL check fed from the same readiness; use one
    # or the other, not both.)
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

    # A group-level service is deregistered shutdown_delay before the tasks
    # get their kill signal (a task's own shutdown_delay only covers
    # task-level services): Consul stops sending new clients here first.
    shutdown_delay = "5s"

    task "impulse-agent" {
      driver = "exec"

      config {
        command = "local/impulse-agent"
        args    = ["-config=local/gateway.hcl"]
        # The exec driver runs the task as "nobody": binding 443 needs
        # CAP_NET_BIND_SERVICE, which is in the driver's default allow_caps
        # and reaches an unprivileged task since Nomad 1.5.3
        # (hashicorp/nomad#16643). Nothing else is needed.
        cap_drop = ["all"]
        cap_add  = ["net_bind_service"]
      }

      # The static binary of `make release` (CGO_ENABLED=0: no libc needed
      # in the exec driver's chroot). go-getter checks it against the
      # sha256sum-style file next to it; the exec driver makes it
      # executable.
      artifact {
        source      = var.impulse_agent_url
        mode        = "file"
        destination = "local/impulse-agent"
        options {
          checksum = "file:${var.impulse_agent_url}.sha256"
        }
      }

      # Consul: the consul block sets no address, so the agent uses
      # CONSUL_HTTP_ADDR when the node's environment sets it (the exec
      # driver passes the client's environment on) and otherwise
      # 127.0.0.1:8500, the node's Consul agent over host networking. With
      # Consul ACLs and Nomad's Consul workload identity, Nomad injects the
      # task's Consul token as CONSUL_HTTP_TOKEN, which the agent reads as
      # the block sets neither token nor token_file.
      #
      # Control API: on the node address (the Consul agent runs the check
      # there), protected by the token from the Nomad variable.
      #
      # drain_timeout (25s) < kill_timeout (30s): SIGTERM turns /v1/ready
      # 503, sends GOAWAY and lets in-flight requests finish before Nomad
      # would send SIGKILL.
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

      # TLS material and control token from the Nomad variable, into
      # secrets/ (the task's private directory, not the allocation's shared
      # one). A rotated certificate or token is picked up by SIGHUP, without
      # a restart. It never fails open: a key missing from the variable
      # fails the template (error_on_missing_key), and an empty token is
      # refused by the agent.
      template {
        destination          = "secrets/cert.pem"
        change_mode          = "signal"
        change_signal        = "SIGHUP"
        error_on_missing_key = true
        data                 = "{{ with nomadVar \"nomad/jobs/impulse-edge\" }}{{ .cert }}{{ end }}"
      }
      template {
        destination          = "secrets/key.pem"
        change_mode          = "signal"
        change_signal        = "SIGHUP"
        error_on_missing_key = true
        data                 = "{{ with nomadVar \"nomad/jobs/impulse-edge\" }}{{ .key }}{{ end }}"
      }
      template {
        destination          = "secrets/control-token"
        change_mode          = "signal"
        change_signal        = "SIGHUP"
        error_on_missing_key = true
        data                 = "{{ with nomadVar \"nomad/jobs/impulse-edge\" }}{{ .control_token }}{{ end }}"
      }

      # kill_timeout stays within the client's max_kill_timeout (default
      # 30s: a longer value would be cut to it silently).
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      resources {
        cpu    = 1000
        memory = 256
      }
    }
  }
}
