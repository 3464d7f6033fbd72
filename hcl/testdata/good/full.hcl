# The full example from interface.md ("Configuration (HCL)"), with the
# listener certificate pointing at the test certificates.
log_level      = "info"          # trace | debug | info | warn | error
log_json       = false
drain_timeout  = "30s"           # graceful shutdown budget for in-flight requests

consul {                          # optional; needed only by upstreams with a consul block
  address    = "127.0.0.1:8500"  # default: CONSUL_HTTP_ADDR, then 127.0.0.1:8500
  scheme     = "http"            # default: from CONSUL_HTTP_SSL / address
  token_file = ""                # default: CONSUL_HTTP_TOKEN_FILE / CONSUL_HTTP_TOKEN; sent as X-Consul-Token
  datacenter = ""
  wait       = "5m"              # blocking-query wait, 1s..10m
  stale      = false             # allow stale reads
  resync_grace = "30s"           # after an outage or index reset, hold an empty answer this long; "0s" = off
  tls {
    ca_file              = ""
    cert_file            = ""
    key_file             = ""
    server_name          = ""
    insecure_skip_verify = false
  }
  register {                      # self-registration of this gateway as a Consul service
    service  = "impulse-agent"
    tags     = []
    address  = ""                 # default: the listener address
  }
}

control {
  address    = "127.0.0.1:9901"  # HTTP/1.1 control API and /metrics
  token_file = ""                # when set, every endpoint but /v1/health needs "Authorization: Bearer <token>"
}

telemetry {                       # go-metrics sinks; Prometheus is always on the control API
  prometheus_retention = "60s"
  statsd_address       = ""
  dogstatsd_address    = ""
  disable_hostname     = true
}

listener "public" {
  address  = "0.0.0.0:8443"
  protocol = "http3"             # http3: QUIC on UDP
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}

upstream "web" {
  load_balancing = "round_robin" # round_robin | random | least_request | consistent_hash | ewma
  hash_on        = ""            # consistent_hash key: header:NAME | cookie:NAME | query:NAME | path | authority | client_ip

  route {                         # one or more; the most specific match over all upstreams wins
    host        = "web.example.com" # exact, or "*.example.com"; empty = any host
    path_prefix = "/"
    methods     = []                # empty = any
  }

  backend "web-1" {               # static backends
    address = "http://127.0.0.1:8080"   # http:// = HTTP/1.1; https:// or schemeless = HTTP/2 over TLS
    weight  = 100
  }

  consul {                        # discovered backends (may be combined with static ones)
    service = "web"
    tags    = []                  # an instance must carry all of them
    health  = "passing"           # passing | warning (warning also admits instances whose worst check is warning)
    datacenter = ""
    namespace  = ""
    partition  = ""
    scheme  = "https"             # how discovered instances are reached; per-instance ServiceMeta "impulse-scheme" overrides
  }

  health_check {                  # active checks, also run against discovered backends
    path                = "/health"
    interval            = "5s"
    timeout             = "1s"
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }

  outlier_detection {             # passive outcome tracking
    consecutive_failures = 5
    base_ejection_time   = "10s"
    max_ejection_percent = 50
  }

  tls {                           # to HTTP/2-over-TLS backends; verification is on by default
    ca_file              = ""
    server_name          = ""
    cert_file            = ""
    key_file             = ""
    insecure_skip_verify = false
  }

  timeouts {
    connect         = "2s"
    response_header = "30s"
    idle            = "90s"
  }
}
