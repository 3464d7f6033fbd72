package agent

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
)

// controlHandler serves the control API (interface.md "Control API"). When a
// token is set, every endpoint but /v1/health needs
// "Authorization: Bearer <token>".
func (a *Agent) controlHandler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /v1/ready", func(w http.ResponseWriter, r *http.Request) {
		ready, reasons, degraded := a.ready()
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
		writeJSON(w, http.StatusOK, a.gw.Upstreams())
	})
	mux.HandleFunc("GET /v1/backends", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, nonNilSlice(a.gw.Backends()))
	})
	mux.HandleFunc("GET /v1/routes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.gw.Routes())
	})
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		gen, diags, err := a.Reload()
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error(), "diagnostics": diags})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"generation": gen})
	})
	mux.Handle("GET /metrics", a.tel.handler)
	if token == "" {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/health" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="impulse-agent"`)
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong bearer token"})
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
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
