package gateway

import (
	"fmt"
	"net/http"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/compress"
	"github.com/impulse-agent/impulse-agent/gateway/cors"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/route"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// Response stages of a route: CORS (package cors) and compression
// (package compress), the same over every ingress. Each costs nothing on
// a route without it: a table without any has a nil map, and serve looks
// nothing up.
//
//	route → [CORS preflight: rate limits, then answered here] → authentication → ... → relay:
//	  backend's fields → CORS fields → compression decision → copy (encoded)
//	gateway answers (finish): CORS fields
//
// A preflight skips authentication: browsers send it without credentials
// (Fetch standard, "CORS-preflight request"), so a route behind
// api_keys or jwt must still answer it. The rate limits count it as any
// request.

// routeEdge is a route's compiled edge stages (each nil when not
// configured): response stages here, path, header and redirect rules in
// edge_rules.go.
type routeEdge struct {
	cors     *cors.Policy
	compress *compress.Policy
	rules
	policy routePolicy // route_policies.go
	split  *routeSplit // splits.go
}

// edgePolicies are the stages of a table's routes that have any, keyed
// like authPolicies. Never modified once published.
type edgePolicies map[routeAt]*routeEdge

// buildEdgePolicies compiles the routes' CORS, Compress, rules and
// policies of ups; old is the current table's (rate-limit buckets carry
// over), attempts the next table's settings by upstream name (the retry
// budget a route shares), byName the next table's upstreams (a route's
// splits). Errors: a block the agent's checks should have refused.
func buildEdgePolicies(old edgePolicies, ups []UpstreamConfig, attempts map[string]*retry.Settings, byName map[string]*upstream.Upstream) (edgePolicies, error) {
	var out edgePolicies
	for _, uc := range ups {
		for i, rc := range uc.Routes {
			r, err := buildRules(rc)
			if err != nil {
				return nil, fmt.Errorf("upstream %q route %d: %w", uc.Name, i, err)
			}
			at := routeAt{uc.Name, i}
			pol, err := buildRoutePolicy(old[at], rc, attempts[uc.Name], uc.ResponseHeaderTimeout)
			if err != nil {
				return nil, fmt.Errorf("upstream %q route %d: %w", uc.Name, i, err)
			}
			sp, err := buildSplit(rc, byName)
			if err != nil {
				return nil, fmt.Errorf("upstream %q route %d: %w", uc.Name, i, err)
			}
			if rc.CORS == nil && rc.Compress == nil && r.none() && pol.none() && sp == nil {
				continue
			}
			e := &routeEdge{rules: r, policy: pol, split: sp}
			if rc.CORS != nil {
				if e.cors, err = cors.New(*rc.CORS); err != nil {
					return nil, fmt.Errorf("upstream %q route %d: %w", uc.Name, i, err)
				}
			}
			if rc.Compress != nil {
				if e.compress, err = compress.New(*rc.Compress); err != nil {
					return nil, fmt.Errorf("upstream %q route %d: %w", uc.Name, i, err)
				}
			}
			if out == nil {
				out = edgePolicies{}
			}
			out[at] = e
		}
	}
	return out, nil
}

// edgeOf is the response stages of route rt (nil: none).
func (t *table) edgeOf(rt *route.Route[*upstream.Upstream]) *routeEdge {
	if len(t.edge) == 0 {
		return nil
	}
	return t.edge[routeAt{rt.Upstream, rt.Index}]
}

// preflightRoute is the route a CORS preflight r asks about: the one
// that would serve its Access-Control-Request-Method, when that route
// has a cors block (nil otherwise: r is routed as any OPTIONS request).
// Only an OPTIONS request with both fields, on a table with such routes,
// is looked at twice.
func (t *table) preflightRoute(r *http.Request, path string) *route.Route[*upstream.Upstream] {
	if len(t.edge) == 0 || !cors.IsPreflight(r) {
		return nil
	}
	m := cors.RequestedMethod(r)
	if m == "" || !route.ValidMethod(m) {
		return nil
	}
	rt := t.routes.Match(r.Host, path, m)
	if rt == nil {
		return nil
	}
	if e := t.edgeOf(rt); e == nil || e.cors == nil {
		return nil
	}
	return rt
}

// answerPreflight answers a CORS preflight at the edge (it never reaches
// the backend): 204 with the allow fields when the route's policy allows
// its origin, method and fields; 403 cors_denied, with no CORS field,
// when not. Recorded with the route's upstream and no backend.
func (rec *recorder) answerPreflight(w http.ResponseWriter, r *http.Request, up *upstream.Upstream, p *cors.Policy) {
	h := w.Header()
	if !p.Preflight(r.Header, h) {
		rec.edge = nil // a refused preflight gets no CORS field, whatever was refused
		rec.finish(w, up, nil, answer.CORSDenied)
		return
	}
	rec.setRequestID(h)
	rec.result(up, nil, http.StatusNoContent, "")
	w.WriteHeader(http.StatusNoContent)
}

// corsFields sets the fields of a response to the request in h (the
// gateway's answer's, or the backend's before they are copied) that the
// route's response_headers rules set (edge_rules.go), then its CORS
// fields, when the route has either.
func (rec *recorder) corsFields(h http.Header) {
	if rec.edge == nil {
		return
	}
	if rec.edge.respHeaders != nil {
		rec.edge.respHeaders.Apply(h, rec.vars())
	}
	if rec.edge.cors != nil {
		rec.edge.cors.Respond(rec.r.Header, h)
	}
}

// compressWriter decides how the backend's response resp is sent on the
// route (compress.Policy.Decide) and sets its fields (compress.Apply). It
// returns the Writer that encodes the body to w, or nil to copy it as it is.
func (rec *recorder) compressWriter(w http.ResponseWriter, r *http.Request, resp *http.Response) *compress.Writer {
	if rec.edge == nil || rec.edge.compress == nil {
		return nil
	}
	d := rec.edge.compress.Decide(r.Method, r.Header["Accept-Encoding"], resp.StatusCode, resp.Header, resp.ContentLength)
	compress.Apply(resp.Header, d)
	if d.Coding == compress.None {
		return nil
	}
	return compress.NewWriter(w, d.Coding)
}
