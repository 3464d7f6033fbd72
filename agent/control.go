package agent

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// controlHandler serves the control API (interface.md "Control API") and
// the status page under /ui/ (ui.go). When a token is set, every endpoint
// but /v1/health and /v1/ready needs it (authorized): "Authorization:
// Bearer <token>", or HTTP Basic with the token as password for GET and
// HEAD, so that a browser can open the status page.
// /v1/ready without the token answers its status code and status only, no
// reasons: health checkers (Consul, Nomad, load balancers) can probe it
// without a secret, as Vault's sys/health and Nomad's agent/health, and
// learn nothing about the upstreams.
func (a *Agent) controlHandler(token string, debug bool) http.Handler {
	mux := http.NewServeMux()
	if debug {
		// Go's profiler, for CPU and heap profiles under real load.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /v1/ready", func(w http.ResponseWriter, r *http.Request) {
		ready, reasons, degraded := a.ready()
		if !a.authorized(r) {
			status, code := "ok", http.StatusOK
			switch {
			case !ready:
				status, code = "not_ready", http.StatusServiceUnavailable
			case len(degraded) > 0:
				status = "degraded"
			}
			writeJSON(w, code, map[string]any{"ready": ready, "status": status})
			return
		}
		switch {
		case !ready:
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "status": "not_ready", "reasons": reasons, "degraded": nonNilSlice(degraded)})
		case len(degraded) > 0:
			// Still serving on the last known instances: stay in rotation.
			writeJSON(w, http.StatusOK, map[string]any{"ready": true, "status": "degraded", "degraded": degraded})
		default:
			writeJSON(w, http.StatusOK, map[string]any{"ready": true, "status": "ok"})
		}
	})
	mux.HandleFunc("GET /v1/upstreams", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, upstreamEntries(a.gw.Upstreams(), a.catalog.Load()))
	})
	mux.HandleFunc("GET /v1/backends", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, nonNilSlice(a.gw.Backends()))
	})
	mux.HandleFunc("GET /v1/routes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, routeEntries(a.gw.Routes(), a.catalog.Load()))
	})
	mux.HandleFunc("GET /v1/status", a.handleStatus) // status.go
	a.handleUI(mux)                                  // ui.go
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		gen, diags, err := a.Reload()
		switch {
		case errors.Is(err, ErrDraining):
			writeJSON(w, http.StatusConflict, map[string]any{"error": "the gateway is draining (shutting down); the configuration is not reloaded", "draining": true})
			return
		case err != nil:
			if len(diags) == 0 {
				diags = []string{err.Error()}
			}
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid configuration; the running one stays", "diagnostics": diags})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"generation": gen})
	})
	mux.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.gw.FlushMetrics()
		a.tel.handler.ServeHTTP(w, r)
	}))
	a.controlToken.Store(&token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The token is read per request: a reload that adds, rotates or
		// removes control.token_file applies at once.
		probe := r.URL.Path == "/v1/health" || r.URL.Path == "/v1/ready" // checkers may send any Host
		if why := browserSafe(r, probe || *a.controlToken.Load() != ""); why != "" {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "refused: " + why})
			return
		}
		if r.URL.Path != "/v1/health" && r.URL.Path != "/v1/ready" && !a.authorized(r) {
			if isUIPath(r.URL.Path) {
				uiUnauthorized(w) // ui.go: a Basic challenge, so a browser asks
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="impulse-agent"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong bearer token"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// authorized reports whether r may use the control API: no token is
// configured, or r carries "Authorization: Bearer <token>", or, for GET and
// HEAD only, HTTP Basic credentials whose password is the token (any user
// name; RFC 7617). The scheme is case-insensitive (RFC 9110 §11.1) and may
// be followed by more than one space; the token is compared in constant
// time. Basic is refused on other methods against cross-site request
// forgery: a browser sends remembered Basic credentials with a form that
// another site posts, never a Bearer token, so POST /v1/reload needs Bearer.
func (a *Agent) authorized(r *http.Request) bool {
	token := *a.controlToken.Load()
	if token == "" {
		return true
	}
	scheme, got, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	switch {
	case !ok:
		return false
	case strings.EqualFold(scheme, "Bearer"):
		return subtle.ConstantTimeCompare([]byte(strings.TrimLeft(got, " ")), []byte(token)) == 1
	case strings.EqualFold(scheme, "Basic") && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		_, pass, ok := r.BasicAuth()
		return ok && subtle.ConstantTimeCompare([]byte(pass), []byte(token)) == 1
	}
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// routeEntry is one element of /v1/routes: the gateway's route, where it
// was declared ("hcl" or "consul:<service>") and the Consul declarations of
// the same route that were skipped in its favour.
type routeEntry struct {
	gateway.RouteInfo
	Source    string          `json:"source"`
	Conflicts []conflictEntry `json:"conflicts,omitempty"`
}

// conflictEntry is a skipped declaration of a route.
type conflictEntry struct {
	// Upstream and Source name the loser (the same for catalog upstreams).
	Upstream string `json:"upstream"`
	Source   string `json:"source"`
	// Rule is "hcl_wins" or "smaller_service_name_wins".
	Rule string `json:"rule"`
}

func routeEntries(routes []gateway.RouteInfo, rep *catalogReport) []routeEntry {
	out := make([]routeEntry, 0, len(routes))
	for _, r := range routes {
		e := routeEntry{RouteInfo: r, Source: rep.source(r.Upstream)}
		k := keyOf(hcl.Route{Host: r.Host, PathPrefix: r.PathPrefix, Path: r.Path, PathRegex: r.PathRegex, Methods: r.Methods})
		for _, c := range rep.Conflicts {
			if c.Winner == r.Upstream && keyOf(hcl.Route{Host: c.Host, PathPrefix: c.PathPrefix, Methods: c.Methods}) == k {
				e.Conflicts = append(e.Conflicts, conflictEntry{Upstream: c.Loser, Source: c.LoserSource, Rule: c.Rule})
			}
		}
		out = append(out, e)
	}
	return out
}

// upstreamEntry is one element of /v1/upstreams: the gateway's upstream,
// its source and, for catalog upstreams, the tags and ServiceMeta values
// that were ignored.
type upstreamEntry struct {
	gateway.UpstreamInfo
	Source          string   `json:"source"`
	CatalogProblems []string `json:"catalog_problems,omitempty"`
}

func upstreamEntries(ups []gateway.UpstreamInfo, rep *catalogReport) []upstreamEntry {
	out := make([]upstreamEntry, 0, len(ups))
	for _, u := range ups {
		out = append(out, upstreamEntry{UpstreamInfo: u, Source: rep.source(u.Name), CatalogProblems: rep.Problems[u.Name]})
	}
	return out
}
