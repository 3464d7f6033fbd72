package agent

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// browserSafe reports why a control API request must be refused although
// its credentials pass, or "": the defences a browser on the operator's
// machine needs when no token guards the API (the loopback default).
//   - DNS rebinding: a page of evil.example whose name was re-pointed at
//     127.0.0.1 reaches the API as same-origin; its Host names evil.example.
//     So a Host that is neither an IP literal nor "localhost" is refused
//     unless anyHost (with a token set, such requests carry no credentials).
//   - Cross-site POST: any page may send a form POST to 127.0.0.1; the
//     browser marks it with an Origin of that page. So a POST whose Origin
//     is present and does not name the request's own Host is refused.
//
// Both follow the Fetch standard's Origin semantics; non-browser clients
// (curl, Consul and Nomad checks) send an IP or localhost and no Origin.
//
// anyHost skips the Host check: a token is set, or the endpoint is a probe
// (/v1/health, /v1/ready) that health checkers reach by any name.
func browserSafe(r *http.Request, anyHost bool) string {
	if !anyHost && !localHost(r.Host) {
		return "the Host " + r.Host + " is not an IP address or localhost (DNS rebinding protection; set control.token_file to allow other names)"
	}
	if r.Method == http.MethodPost {
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || !strings.EqualFold(u.Host, r.Host) {
				return "a cross-site POST (Origin " + o + ")"
			}
		}
	}
	return ""
}

// localHost reports whether host (a Host field, port optional) is an IP
// literal or localhost.
func localHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return net.ParseIP(host) != nil || strings.EqualFold(host, "localhost")
}
