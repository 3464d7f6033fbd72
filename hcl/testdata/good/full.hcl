# Every block and argument of the configuration. Arguments are at their defaults unless
# their comment says otherwise; a block marked "absent: off" turns its feature on by being
# here. Arguments defaulting to the CONSUL_HTTP_* environment are commented out: set, they override it.
# Relative paths resolve against the working directory; validate it with
#   cd hcl && go run ../cmd/impulse-agent validate -config=testdata/good/full.hcl
log_level     = "info"           # trace | debug | info | warn | error
log_json      = false
drain_timeout = "30s"            # graceful shutdown budget for in-flight requests

consul {                          # optional; needed only by upstreams with a consul block
  # address    = "127.0.0.1:8500" # default: CONSUL_HTTP_ADDR, then 127.0.0.1:8500
  # scheme     = "http"           # default: an http:// or https:// prefix of address, CONSUL_HTTP_SSL, then http
  # token_file = ""               # default: CONSUL_HTTP_TOKEN_FILE; sent as X-Consul-Token
  # token      = ""               # default: CONSUL_HTTP_TOKEN; excludes token_file
  datacenter    = ""              # "" = the agent's own
  wait          = "5m"            # blocking-query wait, 1s..10m
  stale         = false           # allow stale reads
  max_staleness = "10m"           # default 2 × wait, at least wait + wait/16 + 5s; /v1/ready reports "degraded" past it
  resync_grace  = "30s"           # after an outage or index reset, hold an empty answer this long; "0s" = off
  tls {                           # HTTPS to Consul; "" = unset
    ca_file              = ""     # PEM roots replacing the system roots
    cert_file            = ""     # client certificate, with key_file
    key_file             = ""
    server_name          = ""
    insecure_skip_verify = false
  }
  register {                      # self-registration of this gateway as a Consul service; absent: off
    service = "impulse-agent"
    tags    = []
    address = ""                  # default: the listener address
  }
  catalog {                       # routes declared in Consul by service tags
    enabled        = false        # not the default: a catalog block turns the mode on unless enabled = false
    tag_prefix     = "impulse"
    default_scheme = "http"       # how catalog services are reached: http | https | h2c
    filter         = ""           # Consul filter expression for /v1/catalog/services; "" = none
  }
}

control {
  address      = "127.0.0.1:9901" # HTTP/1.1 control API and /metrics
  token_file   = ""               # when set, every endpoint but /v1/health and /v1/ready needs "Authorization: Bearer <token>"
  enable_debug = false            # Go's profiler under /debug/pprof/

  allow_unauthenticated = false   # true: a non-loopback address without token_file is allowed
}

telemetry {                       # go-metrics sinks; Prometheus is always on the control API
  prometheus_retention = "24h"    # how long /metrics keeps a series after its last update
  statsd_address       = ""       # host:port of a statsd sink (UDP); "" = off
  dogstatsd_address    = ""       # host:port of a DogStatsD agent (UDP; labels become tags); "" = off
  dogstatsd_tags       = []       # tags on every DogStatsD metric, e.g. ["env:prod"]
  disable_hostname     = true     # false: a host tag on DogStatsD metrics (never in a name)
}

listener "public" {               # no default: at least one listener is required
  address   = "0.0.0.0:8443"      # UDP for h3, TCP for h1 and h2: the same port
  protocols = ["h1", "h2", "h3"]  # any subset; the deprecated protocol = "http3" means ["h3"]
  alt_svc_port    = 0             # advertised in Alt-Svc over TCP; 0 = the listener's port
  alt_svc_max_age = "24h"
  early_data      = false         # 0-RTT on QUIC; unsafe methods in early data get 425 (README)
  tls {                           # required; both files must load as a matching pair
    cert_file           = "testdata/certs/cert.pem" # the default certificate: for a name no certificate block covers, or no SNI
    key_file            = "testdata/certs/key.pem"
    client_auth         = "none"  # none | request (a certificate sent must verify) | require (no handshake without one)
    client_ca_file      = ""      # PEM CAs of client certificates; required unless client_auth = "none"
    forward_client_cert = false   # send a verified client certificate to backends as X-Forwarded-Client-Cert
    certificate {                 # not the default (none); repeatable; chosen by SNI from the DNS names of its SANs
      cert_file = "testdata/certs/a.test.pem"
      key_file  = "testdata/certs/a.test-key.pem"
    }
  }
  limits {                        # every protocol where it applies (README "Limits")
    max_header_bytes       = 65536  # 431 beyond; 1 KiB..16 MiB
    max_uri_bytes          = 8192   # 414 uri_too_long beyond; 64..1048576
    max_request_body_bytes = 0      # 413 body_too_large beyond; 0 = none
    read_header_timeout    = "10s"  # TLS handshake and HTTP/1.1 headers; the QUIC handshake idle timeout
    client_body_timeout    = "60s"  # 408 client_body_timeout when the client's body stalls this long
    idle_timeout           = "2m"   # a connection without requests closes
    max_connections        = 0      # TCP and QUIC together; 0 = none
    max_concurrent_streams = 250    # per HTTP/2 or HTTP/3 connection
  }
  # proxy_protocol {              # none by default: HAProxy PROXY v1/v2 headers on TCP, read before TLS (README "Client address")
  #   trusted = ["10.0.0.0/8"]    # required in the block: the balancers' CIDR prefixes
  #   mode    = "required"        # required (a trusted peer must send one) | optional
  #   udp     = ""                # "" | spp | v2: a header on each QUIC datagram from a UDP balancer
  # }
  forwarded_headers {             # absent or trusted = []: X-Forwarded-For / Forwarded are not believed
    trusted = []                  # CIDR prefixes of the forwarders whose headers name the client
  }
  ip_allow = []                   # CIDR prefixes of the client address; empty = all (else 403 ip_denied)
  ip_deny  = []                   # CIDR prefixes refused (403 ip_denied); deny wins over allow
}

upstream "web" {
  load_balancing = "round_robin"  # round_robin | random | least_request | consistent_hash | ewma
  hash_on        = ""             # consistent_hash key: header:NAME | cookie:NAME | query:NAME | path | authority | client_ip
  slow_start     = "0s"           # ramp a new or recovered backend's weight over this long, at most 1h; "0s" = off

  route {                         # one or more; the most specific match over all upstreams wins
    host        = "web.example.com" # not the default ("" = any host); exact, or "*.example.com"
    path_prefix = "/"
    methods     = []                # empty = any
    ip_allow    = []                # CIDR prefixes of the client address, after routing; empty = all
    ip_deny     = []                # deny wins (403 ip_denied)
    path           = ""             # an exact path instead of path_prefix (README "Path matching"); "" = none
    path_regex     = ""             # RE2 matched against the whole normalised path, instead of path_prefix; "" = none
    strip_prefix   = false          # forward the path without path_prefix (README "Path rewrites")
    prefix_rewrite = ""             # replace path_prefix with this path; "" = none; exclusive with strip_prefix
    request_headers {               # fields the backend gets (README "Header rules"); also in the upstream block
      set    = {}                   # { "X-Env" = "prod", "X-Client" = "{client_ip}" }: replace
      add    = {}                   # append a value
      remove = []                   # delete; runs first
    }
    response_headers {              # fields the client gets
      set    = {}
      add    = {}
      remove = []
    }
    timeouts {}                     # request, body_idle, response_header: this route's, in place of the upstream's
    # retry { attempts = 3 }        # replaces the upstream's retry block for this route (README "Per-route policies")
    # rate_limit {                  # this route's own rate limit, in place of the upstream's
    #   requests_per_second = 10
    # }
    sticky         = ""             # splits' hash key: cookie:NAME | header:NAME | query:NAME | path | authority | client_ip; "" = none
  }

  backend "web-1" {               # static backends
    address = "http://127.0.0.1:8080"   # http:// = HTTP/1.1; https:// or schemeless = HTTP/2 over TLS; h2c://host:port = cleartext HTTP/2
    weight  = 100                       # 1..1000000
  }

  consul {                        # discovered backends (may be combined with static ones)
    service    = "web"            # required
    tags       = []               # an instance must carry all of them
    health     = "passing"        # passing | warning (warning also admits instances whose worst check is warning)
    datacenter = ""
    namespace  = ""
    partition  = ""
    scheme     = "https"          # how discovered instances are reached (http | https | h2c); per-instance ServiceMeta "impulse-scheme" overrides
    connect    = false            # true: /v1/health/connect/<service>, dialled with mTLS under the connect block's identity (no scheme, no backend blocks, no tls)
    # protocol = "http"           # only with connect = true: http (HTTP/1.1) | http2 | grpc
  }

  health_check {                  # active checks, also run against discovered backends; absent: off
    path                = "/health"
    interval            = "5s"
    timeout             = "1s"
    healthy_threshold   = 2
    unhealthy_threshold = 3
    unknown_is_healthy  = true    # a backend takes traffic before its first check completes
  }

  outlier_detection {             # passive outcome tracking (ejection of failing backends); absent: on, as written here
    enabled              = true   # false turns the default off
    consecutive_failures = 5
    base_ejection_time   = "10s"
    max_ejection_percent = 100    # 0..100; with every member ejected, the one ejected longest ago is still tried
  }

  tls {                           # to HTTP/2-over-TLS backends; verification is on by default
    ca_file              = ""     # PEM roots replacing the system roots
    server_name          = ""
    cert_file            = ""     # client certificate, with key_file
    key_file             = ""
    insecure_skip_verify = false
  }

  timeouts {
    connect         = "2s"
    response_header = "30s"       # exceeding it answers 504
    idle            = "90s"       # how long an idle backend connection is kept
    body_idle       = "60s"       # longest wait for the next response body bytes
    request         = "0s"        # the whole exchange, every attempt included (0s: none)
  }

  limits {
    max_request_body_bytes   = 0  # replaces the listener's for requests routed here; 0 = the listener's
    max_requests             = 0  # in flight to the upstream, tunnels included; beyond: 503 overloaded, Retry-After; 0 = none
    max_requests_per_backend = 0  # in flight to each backend; a full one is skipped; 0 = none
    max_queue                = 0  # requests over max_requests that wait their turn (FIFO); 0 = none, refused at once
    # queue_timeout          = "1s" # no default: required with max_queue, and only allowed with it
  }

  # rate_limit {                  # none by default (429 rate_limited beyond); a listener takes the same block, applied first
  #   requests_per_second = 50    # required in the block: > 0, fractions allowed
  #   burst               = 50    # default ceil(requests_per_second); >= 1
  #   key                 = "client_ip" # client_ip | header:NAME | route
  # }
  retry {                         # README "Retries"
    attempts              = 2     # tries of one request, the first included; 1 = no retries
    on                    = ["connect-failure", "refused-stream", "reset"]  # also: 502, 503, 504; reset and those for idempotent methods only
    per_try_timeout       = "0s"  # each try's wait for response headers; 0 = response_header only
    backoff               = "25ms"  # jittered exponential back-off base; capped at 10 × backoff
    max_body_bytes        = 65536 # request body kept for a retry; a longer one is not retried once sent
    budget_percent        = 20    # retries in flight ≤ max(min_retry_concurrency, 20 % of active requests)
    min_retry_concurrency = 3
  }

  # hedge { delay = "50ms"  max = 1 }  # README "Hedging": off unless present; delay is required
}

# Path normalisation (top level; README "Paths: what is matched, what is forwarded").
normalize_path  = true           # forward the path's normal form; false: as sent (routing always uses the normal form)
merge_slashes   = false          # true: "//" is "/" for routing and forwarding
escaped_slashes = "reject"       # reject | keep | unescape: what %2F, %5C and "\" mean (README "Routing")

limits {                         # top level: the whole gateway (README "Concurrency limits")
  max_requests = 0               # in flight through every listener and upstream, tunnels included; beyond: 503 overloaded; 0 = none
}

tracing {                        # OpenTelemetry over OTLP (README "Tracing"); absent: off
  otlp_endpoint = "127.0.0.1:4317" # required; host:port (plaintext) or https://host:port (TLS)
  protocol      = "grpc"           # grpc | http
  sample_ratio  = 1.0              # new traces recorded, 0..1; a parent's sampled flag is honoured
  service_name  = "impulse-agent"
}

access_log {                     # one line per request at every log level (README "Access log"); absent: off
  path          = "stdout"       # stdout | stderr | a file, appended to and reopened on SIGUSR1 and reload
  format        = "json"         # json | combined (NCSA combined, as Apache and nginx)
  include_query = false          # true: log query strings, which often carry secrets
}

upstream "admin" {               # edge authentication on routes (README "Edge authentication"); each block absent: off
  route {
    path_prefix = "/admin/"
    api_keys {                   # every block present must pass: api_keys, then basic_auth, then forward_auth
      header    = "X-Api-Key"    # the request field holding the key; removed before the backend
      keys_file = "testdata/auth/keys"   # required; KEY or NAME:KEY lines, read at every load and reload
    }
    basic_auth {                 # HTTP Basic (RFC 7617); Authorization removed before the backend
      users_file = "testdata/auth/users" # required; USER:BCRYPT-HASH lines (htpasswd -B)
      realm      = "impulse-agent"
    }
    forward_auth {               # a GET to address per request, Traefik ForwardAuth style
      address               = "http://127.0.0.1:4181/auth" # required; http or https
      copy_request_headers  = [] # request fields sent to the auth service besides X-Forwarded-*
      copy_response_headers = [] # fields of its 2xx answer set on the request (a client's own removed)
      timeout               = "2s" # 1ms..1m; past it: 503 auth_unavailable
    }
  }
  route {
    path_prefix = "/tokens/"
    jwt {                        # Authorization: Bearer JWT (RFC 7519, RFC 6750); removed before the backend
      issuer         = "https://id.example.com"  # required; the "iss" every token carries
      audiences      = ["api"]   # required; a token's "aud" names at least one
      jwks_file      = "testdata/auth/jwks.json" # or jwks_url (https); a JWK Set, read at every load and reload
      algorithms     = ["ES256", "RS256"]        # asymmetric only: HS* and none are refused
      forward_claims = {}        # claim = "Field", e.g. { sub = "X-User" }; a client's own fields removed
      clock_skew     = "30s"     # 0s..5m; leeway of exp, nbf and iat
      realm          = "impulse-agent"
    }
  }
  route {
    path_prefix = "/app/"
    compress {                   # absent: off (README "Compression"); for clients that accept it
      types      = ["application/json", "text/*"]  # type/subtype or type/*
      min_bytes  = 1024          # a smaller Content-Length is sent as it is
      algorithms = ["zstd", "br", "gzip"]          # offered, most preferred first
    }
    cors {                       # absent: off (README "CORS"); preflights answered here
      allow_origins     = []     # "scheme://host[:port]" each, or ["*"]
      allow_methods     = []     # besides GET, HEAD and POST
      allow_headers     = []     # request fields a preflight allows
      expose_headers    = []     # response fields scripts may read
      max_age           = "0s"   # Access-Control-Max-Age, whole seconds up to 24h; 0s: not sent
      allow_credentials = false  # never with "*"
    }
  }
  backend "admin-1" {
    address = "http://127.0.0.1:8081"
  }
}

upstream "moved" {               # a route that only redirects needs no backend (README "Redirects")
  route {
    path_prefix = "/old/"
    redirect {
      to          = "https://new.example.com/new/"  # required: an http or https URL; its path replaces path_prefix
      code        = 308                              # 301 | 302 | 307 | 308
      strip_query = false
    }
  }
}

upstream "canary" {              # a route that only splits needs no backend (README "Traffic splits")
  route {
    path_prefix = "/shop/"
    split {                      # weighted: each upstream's own health, limits and retries apply
      upstream = "web"
      weight   = 90              # 0..1000000; the route's weights may not sum to 0
    }
    split {
      upstream = "admin"
      weight   = 10
    }
    sticky = "cookie:session"    # one session, one side; "" = split each request by weight
  }
}
