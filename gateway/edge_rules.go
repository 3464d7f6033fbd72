package gateway

import (
	"fmt"
	"net"
	"net/http"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/headers"
	"github.com/impulse-agent/impulse-agent/gateway/rewrite"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

// Path, header and redirect rules of a route (README "Path rewrites",
// "Header rules", "Redirects"), stages of the one pipeline, the same over
// every ingress. A route without any has none of these pointers set, and
// a table without any such route looks nothing up (edgeOf).
//
//	route → IP rules → early data → [redirect: answered here] → preflight →
//	authentication → rate limits → [path rewrite, request_headers] →
//	limits → attempts → relay: [response_headers] → CORS → compression
//	gateway answers after routing (finish): [response_headers] → CORS

// rules are a route's compiled path, header and redirect rules.
type rules struct {
	rewrite     *rewrite.Rule
	redirect    *rewrite.Redirect
	reqHeaders  *headers.Rules
	respHeaders *headers.Rules
}

func (r rules) none() bool {
	return r.rewrite == nil && r.redirect == nil && r.reqHeaders == nil && r.respHeaders == nil
}

// buildRules compiles rc's rules against its normalised path prefix (as
// the route table matches it). Errors: a rule the agent's checks should
// have refused.
func buildRules(rc RouteConfig) (rules, error) {
	var r rules
	prefix := rc.PathPrefix
	if prefix == "" { // an exact or regex route: a redirect keeps the whole path
		if rc.Rewrite != (rewrite.Config{}) {
			return r, fmt.Errorf("strip_prefix and prefix_rewrite need a path_prefix")
		}
		prefix = "/"
	}
	prefix, _ = pathnorm.NormalizePath(prefix, pathnorm.PathOptions{EscapedSlashes: pathnorm.EscapedSlashesKeep})
	var err error
	if r.rewrite, err = rewrite.New(rc.Rewrite, prefix); err != nil {
		return r, err
	}
	if rc.Redirect != nil {
		if r.redirect, err = rewrite.NewRedirect(*rc.Redirect, prefix); err != nil {
			return r, err
		}
	}
	if r.reqHeaders, err = headers.New(rc.RequestHeaders, true); err != nil {
		return r, err
	}
	if r.respHeaders, err = headers.New(rc.ResponseHeaders, false); err != nil {
		return r, err
	}
	return r, nil
}

// vars are the values of the header rules' variables for the request
// (headers.Vars): the client's IP (as the listener settled it), the
// request ID, the authority as sent, the scheme and the route's path
// prefix.
// Filled once, in the recorder (no allocation).
func (rec *recorder) vars() *headers.Vars {
	v := &rec.hvars
	if v.Scheme != "" {
		return v
	}
	r := rec.r
	*v = headers.Vars{RequestID: rec.id(), Host: r.Host, Scheme: "https", Route: rec.out.Route}
	if r.TLS == nil {
		v.Scheme = "http"
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		v.ClientIP = ip
	}
	return v
}

// answerRedirect answers r on a redirect route: the route's status and
// Location, an empty body, recorded with the route's upstream and no
// backend. path is r's normalised path (escaped form).
func (rec *recorder) answerRedirect(w http.ResponseWriter, r *http.Request, up *upstream.Upstream, d *rewrite.Redirect, path string) {
	h := w.Header()
	rec.setRequestID(h)
	rec.corsFields(h)
	h["Location"] = []string{d.Location(path, r.URL.RawQuery)}
	h["Content-Length"] = []string{"0"}
	rec.result(up, nil, d.Code(), "")
	w.WriteHeader(d.Code())
}

// forwardRules rewrites r's path (path is its normalised form, which the
// route matched) and applies the route's request_headers, before the
// attempts. false: r was answered (400 invalid_path for a rewrite that
// would leave the normal form, which FuzzRewrite shows never happens).
func (rec *recorder) forwardRules(w http.ResponseWriter, r *http.Request, up *upstream.Upstream, path string) bool {
	e := rec.edge
	if e.rewrite != nil {
		out, ok := e.rewrite.Apply(path)
		if !ok {
			rec.g.log.Error("path rewrite left the normal form", "path", path, "upstream", up.Name())
			rec.finish(w, up, nil, answer.InvalidPath)
			return false
		}
		u := *r.URL
		u.Path, u.RawPath = rewrite.PathAndEscaped(out)
		r.URL = &u
		rec.out.UpstreamPath = out
	}
	if e.reqHeaders != nil {
		e.reqHeaders.Apply(r.Header, rec.vars())
	}
	return true
}
