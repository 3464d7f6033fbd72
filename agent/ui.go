package agent

// The status page (GET /ui/ on the control address): one HTML page, its
// script and style sheet, embedded in the binary; the script polls
// /ui/status.json (the GET /v1/status document) every second.
//
// Why the data is under /ui/ too: a browser that was asked for Basic
// credentials on /ui/ sends them on its own to every path at or below
// /ui/ (RFC 7617 §2.2), not to /v1/.

import (
	"embed"
	"net/http"
	"strings"
)

//go:embed ui/index.html ui/app.js ui/style.css
var uiFiles embed.FS

// uiAssets maps each page path to its embedded file and content type.
var uiAssets = map[string][2]string{
	"/ui/":          {"ui/index.html", "text/html; charset=utf-8"},
	"/ui/app.js":    {"ui/app.js", "text/javascript; charset=utf-8"},
	"/ui/style.css": {"ui/style.css", "text/css; charset=utf-8"},
}

// uiCSP allows the page its own script, style, and data (no inline script
// or style, no framing, no forms, no plugins).
const uiCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// isUIPath reports whether path belongs to the status page.
func isUIPath(path string) bool { return path == "/ui" || strings.HasPrefix(path, "/ui/") }

// uiHeaders sets the page's security headers.
func uiHeaders(h http.Header) {
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

// uiUnauthorized answers a status page request without the token: 401 with
// a Basic challenge, so that a browser prompts (the token is the password).
func uiUnauthorized(w http.ResponseWriter) {
	uiHeaders(w.Header())
	w.Header().Set("WWW-Authenticate", `Basic realm="impulse-agent", charset="UTF-8"`)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte("401 Unauthorized: the status page needs the control token as the password (any user name)\n"))
}

// handleUI registers the page's routes on mux (GET serves HEAD too).
func (a *Agent) handleUI(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /ui/status.json", func(w http.ResponseWriter, r *http.Request) {
		uiHeaders(w.Header())
		a.handleStatus(w, r)
	})
	mux.HandleFunc("GET /ui/", func(w http.ResponseWriter, r *http.Request) {
		uiHeaders(w.Header())
		asset, ok := uiAssets[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		b, err := uiFiles.ReadFile(asset[0])
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", asset[1])
		_, _ = w.Write(b)
	})
}
