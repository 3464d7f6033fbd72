package gateway

import (
	"net/http"
	"strconv"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/auth"
	"github.com/impulse-agent/impulse-agent/gateway/route"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/gateway/wire"
)

// Edge authentication: the admission step after routing and before the
// rate limits (validate → route → authenticate → rate limit → concurrency
// limits → pick), the same over every ingress. A route's policy
// (auth.Policy) decides; this file answers and records: one
// impulse_auth count per method asked, the Outcome's Auth and AuthSubject
// (access log fields auth and auth_subject).

// routeAt names a route by its upstream and its index there
// (route.Definition.Index): the key of a table's auth policies.
type routeAt struct {
	upstream string
	index    int
}

// authPolicies are the policies of a table's routes with authentication.
// Never modified once published.
type authPolicies map[routeAt]*auth.Policy

// forwards are the Forwards the policies use, once each.
func (p authPolicies) forwards() map[*auth.Forward]bool {
	out := map[*auth.Forward]bool{}
	for _, pol := range p {
		if f := pol.Forward(); f != nil {
			out[f] = true
		}
	}
	return out
}

// buildAuthPolicies compiles the routes' Auth of ups for the next table,
// keeping old's Forward (and its connections) where a forward_auth block
// is unchanged. On error the Forwards it made are closed.
func buildAuthPolicies(old authPolicies, ups []UpstreamConfig) (authPolicies, error) {
	var out authPolicies
	kept := old.forwards()
	var made []*auth.Forward
	for _, uc := range ups {
		for i, rc := range uc.Routes {
			if rc.Auth.Empty() {
				continue
			}
			var fw *auth.Forward
			if rc.Auth.Forward != nil {
				for f := range kept {
					if f.Same(*rc.Auth.Forward) {
						fw = f
						break
					}
				}
			}
			p, err := auth.New(rc.Auth, fw)
			if err != nil {
				for _, f := range made {
					f.Close()
				}
				return nil, err
			}
			if f := p.Forward(); f != nil && f != fw {
				made = append(made, f)
			}
			if out == nil {
				out = authPolicies{}
			}
			out[routeAt{uc.Name, i}] = p
		}
	}
	return out, nil
}

// closeRetiredForwards closes the Forwards of old that next no longer
// uses.
func closeRetiredForwards(old, next authPolicies) {
	keep := next.forwards()
	for f := range old.forwards() {
		if !keep[f] {
			f.Close()
		}
	}
}

// authenticate runs rt's authentication when it has some (true: go on);
// path is the normalized path the route matched (normalizeTarget), which
// forward auth describes with the query. A refusal is answered here: 401
// auth_required (no credentials) or auth_invalid (wrong ones), with
// WWW-Authenticate for basic_auth; 429 auth_busy with Retry-After: 1 when
// a password would need a bcrypt slot and none is free; the auth
// service's own answer, as sent, when forward auth refused (a gRPC call
// gets its gRPC status instead: grpcOfDenial); 503 auth_unavailable when
// it could not be asked; nothing (499) when the client left meanwhile. A
// request refused never reaches a backend nor spends a rate-limit token.
func (g *Gateway) authenticate(rec *recorder, w http.ResponseWriter, r *http.Request, tbl *table, rt *route.Route[*upstream.Upstream], path string) bool {
	if len(tbl.auth) == 0 {
		return true
	}
	p := tbl.auth[routeAt{rt.Upstream, rt.Index}]
	if p == nil {
		return true
	}
	up := rt.Target
	uri := path
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		uri += "?" + r.URL.RawQuery
	}
	d := p.Authenticate(r.Context(), r, uri)
	for _, s := range d.Steps[:d.N] {
		g.obs.Metrics.Auth(rt.PathPrefix, s.Method, s.Result, up.Name())
	}
	last := d.Last()
	rec.out.Auth = authField(last)
	if d.OK() {
		rec.out.AuthSubject = d.Subject
		return true
	}
	switch {
	case d.Denial != nil && wire.IsGRPC(r.Header):
		rec.grpcDenial(w, up, d.Denial.Status)
	case d.Denial != nil:
		rec.relayDenial(w, up, d.Denial)
	case last.Result == auth.ResultCanceled:
		rec.finish(w, up, nil, answer.ClientCanceled)
	case last.Result == auth.ResultUnavailable:
		rec.finish(w, up, nil, answer.AuthUnavailable)
	case last.Result == auth.ResultBusy:
		w.Header()["Retry-After"] = retryAfterOne
		rec.finish(w, up, nil, answer.AuthBusy)
	default:
		if c := p.Challenge(last.Method); c != "" {
			w.Header()["Www-Authenticate"] = []string{c}
		}
		a := answer.AuthInvalid
		if last.Result == auth.ResultMissing {
			a = answer.AuthRequired
		}
		rec.finish(w, up, nil, a)
	}
	return false
}

// authFields are the access log's auth values, built once.
var authFields = func() map[auth.Step]string {
	m := map[auth.Step]string{}
	for _, method := range []string{auth.MethodAPIKey, auth.MethodBasic, auth.MethodForward} {
		for _, res := range []string{auth.ResultOK, auth.ResultMissing, auth.ResultDenied, auth.ResultUnavailable, auth.ResultCanceled, auth.ResultBusy} {
			m[auth.Step{Method: method, Result: res}] = method + ":" + res
		}
	}
	return m
}()

// authField is "method:result" of s, without allocating.
func authField(s auth.Step) string {
	if v, ok := authFields[s]; ok {
		return v
	}
	return s.Method + ":" + s.Result
}

// retryAfterOne is the Retry-After of auth_busy: a bcrypt slot frees
// within about a second at the highest cost a users_file may hold.
var retryAfterOne = []string{"1"}

// relayDenial answers with the auth service's refusal d as it sent it
// (status, fields, body), with the request's ID; recorded with d's status
// and no reason (a relayed answer). Without a Content-Type in d none is
// sent either: a nil entry stops net/http from sniffing one (its
// ResponseWriter documents it).
func (rec *recorder) relayDenial(w http.ResponseWriter, up *upstream.Upstream, d *auth.Denial) {
	h := w.Header()
	for k, v := range d.Header {
		h[k] = v
	}
	if _, ok := d.Header["Content-Type"]; !ok {
		h["Content-Type"] = nil
	}
	rec.setRequestID(h)
	rec.result(up, nil, d.Status, "")
	w.WriteHeader(d.Status)
	n, _ := w.Write(d.Body)
	rec.out.BytesOut = int64(n)
}

// grpcDenial answers a gRPC call the auth service refused with status as
// a gRPC client understands it: a Trailers-Only response (as
// writeGRPCError's) whose grpc-status is grpcOfDenial(status) and
// grpc-message "forward_auth%20STATUS"; the service's fields and body are
// not relayed (a gRPC client reads neither), and no x-impulse-error (the
// refusal is the service's). Recorded with the service's status and no
// reason, as a relayed refusal is.
func (rec *recorder) grpcDenial(w http.ResponseWriter, up *upstream.Upstream, status int) {
	h := w.Header()
	rec.setRequestID(h)
	rec.result(up, nil, status, "")
	h["Content-Type"] = []string{"application/grpc"}
	h["Grpc-Status"] = []string{strconv.Itoa(grpcOfDenial(status))}
	h["Grpc-Message"] = []string{"forward_auth%20" + strconv.Itoa(status)}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(http.StatusOK)
}

// grpcOfDenial is the gRPC status of an auth service's refusal, as gRPC's
// HTTP to gRPC status mapping (grpc/grpc doc/http-grpc-status-mapping.md)
// has it: 401 UNAUTHENTICATED, 403 PERMISSION_DENIED, the rest as the
// gateway's own answers map them (answer.GRPCOfHTTP: 429 and 503
// RESOURCE_EXHAUSTED and UNAVAILABLE, a redirect UNKNOWN).
func grpcOfDenial(status int) int {
	switch status {
	case http.StatusUnauthorized:
		return answer.GRPCUnauthenticated
	case http.StatusForbidden:
		return answer.GRPCPermissionDenied
	}
	return answer.GRPCOfHTTP(status)
}
