package gateway

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

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

// keys are the RemoteKeys the policies use, once each.
func (p authPolicies) keys() map[*auth.RemoteKeys]bool {
	out := map[*auth.RemoteKeys]bool{}
	for _, pol := range p {
		if k := pol.Keys(); k != nil {
			out[k] = true
		}
	}
	return out
}

// buildAuthPolicies compiles the routes' Auth of ups for the next table,
// keeping old's Forward (and its connections) where a forward_auth block
// is unchanged, and old's RemoteKeys (its key set) where a jwt block
// fetches the same jwks_url the same way; routes of this table naming the
// same set share one. A jwt block whose source changed (another jwks_url,
// jwks_ca_file or algorithms) gets a new RemoteKeys carrying the last
// good set of the one it replaces (carrySource), so that a new source
// that cannot be fetched degrades like an outage. On error what it made
// is closed.
func (g *Gateway) buildAuthPolicies(old authPolicies, ups []UpstreamConfig) (authPolicies, error) {
	var out authPolicies
	keptF, keptK := old.forwards(), old.keys()
	var madeF []*auth.Forward
	var madeK []*auth.RemoteKeys
	closeMade := func() {
		for _, f := range madeF {
			f.Close()
		}
		for _, k := range madeK {
			k.Close()
		}
	}
	for _, uc := range ups {
		for i, rc := range uc.Routes {
			if rc.Auth.Empty() {
				continue
			}
			sh := auth.Shared{OnFetch: g.logJWKSFetch}
			if rc.Auth.Forward != nil {
				for f := range keptF {
					if f.Same(*rc.Auth.Forward) {
						sh.Forward = f
						break
					}
				}
			}
			if j := rc.Auth.JWT; j != nil && j.JWKSURL != "" {
				for _, k := range append(slices.Collect(maps.Keys(keptK)), madeK...) {
					if k.Same(*j) {
						sh.Keys = k
						break
					}
				}
			}
			at := routeAt{uc.Name, i}
			if j := rc.Auth.JWT; j != nil && j.JWKSURL != "" && sh.Keys == nil {
				sh.Carry = carrySource(old, at, j.Issuer)
			}
			p, err := auth.New(rc.Auth, sh)
			if err != nil {
				closeMade()
				return nil, err
			}
			if f := p.Forward(); f != nil && f != sh.Forward {
				madeF = append(madeF, f)
			}
			if k := p.Keys(); k != nil && k != sh.Keys {
				madeK = append(madeK, k)
				if s := k.State(); s.Carried {
					g.log.Info("jwt: the key set's source changed; the previous source's last good set verifies until the new one is fetched",
						"jwks_url", s.URL, "stale_at", s.StaleAt.UTC().Format(time.RFC3339))
				}
			}
			if out == nil {
				out = authPolicies{}
			}
			out[at] = p
		}
	}
	return out, nil
}

// carrySource is the RemoteKeys of old whose set a new one for a jwt block
// of issuer at route at carries (nil: none): the one the same route used,
// else one another route used for the same issuer (routes in order), if
// it has a set. Only the same issuer's: another issuer's tokens are never
// verified by it anyway, and its set would turn the new issuer's tokens
// into 401 unknown key instead of 503 auth_unavailable.
func carrySource(old authPolicies, at routeAt, issuer string) *auth.RemoteKeys {
	ok := func(p *auth.Policy) bool {
		return p != nil && p.Keys() != nil && p.Issuer() == issuer && p.Keys().State().FetchedAt != (time.Time{})
	}
	if p := old[at]; ok(p) {
		return p.Keys()
	}
	ats := slices.SortedFunc(maps.Keys(old), func(a, b routeAt) int {
		if c := strings.Compare(a.upstream, b.upstream); c != 0 {
			return c
		}
		return a.index - b.index
	})
	for _, a := range ats {
		if ok(old[a]) {
			return old[a].Keys()
		}
	}
	return nil
}

// logJWKSFetch logs what a fetch of a jwt block's key set left to verify
// with: after a failure (warning), the last good set (until when), the
// set carried over a reload, or none (tokens of its routes get 503
// auth_unavailable); after a success only when it replaced a carried set
// (the new source works). The first success after other failures is not
// worth a line: impulse_auth's unavailable count says when tokens were
// refused for want of a set.
func (g *Gateway) logJWKSFetch(f auth.FetchReport) {
	staleAt := func() string { return f.StaleAt.UTC().Format(time.RFC3339) }
	switch {
	case f.Err == nil && f.ReplacedCarried:
		g.log.Info("jwt: key set fetched from the new source; it replaces the set carried over the reload", "jwks_url", f.URL)
	case f.Err == nil:
	case f.Usable && f.Carried:
		g.log.Warn("jwt: fetching the key set from the new source failed; the previous source's last good set is kept until a fetch succeeds",
			"jwks_url", f.URL, "error", f.Err.Error(), "stale_at", staleAt())
	case f.Usable:
		g.log.Warn("jwt: fetching the key set failed; the last good set is kept", "jwks_url", f.URL, "error", f.Err.Error(),
			"stale_at", staleAt())
	case f.StaleAt.IsZero():
		g.log.Warn("jwt: fetching the key set failed; no key set yet: tokens are refused with 503 auth_unavailable until a fetch succeeds",
			"jwks_url", f.URL, "error", f.Err.Error())
	default:
		g.log.Warn("jwt: fetching the key set failed; the last good set went stale: tokens are refused with 503 auth_unavailable until a fetch succeeds",
			"jwks_url", f.URL, "error", f.Err.Error(), "stale_since", staleAt())
	}
}

// KeySets is the state of every jwks_url key set the routes use, by URL
// (for /v1/ready: a set that does not verify, or verifies through failed
// fetches, is degraded service).
func (g *Gateway) KeySets() []auth.KeysState {
	var out []auth.KeysState
	for k := range g.table.Load().auth.keys() {
		out = append(out, k.State())
	}
	slices.SortFunc(out, func(a, b auth.KeysState) int { return strings.Compare(a.URL, b.URL) })
	return out
}

// closeRetiredForwards closes the Forwards and RemoteKeys of old that next
// no longer uses.
func closeRetiredForwards(old, next authPolicies) {
	keepF, keepK := next.forwards(), next.keys()
	for f := range old.forwards() {
		if !keepF[f] {
			f.Close()
		}
	}
	for k := range old.keys() {
		if !keepK[k] {
			k.Close()
		}
	}
}

// authenticate runs rt's authentication when it has some (true: go on);
// path is the normalized path the route matched (normalizeTarget), which
// forward auth describes with the query. A refusal is answered here: 401
// auth_required (no credentials) or auth_invalid (wrong ones), with
// WWW-Authenticate for basic_auth and jwt; 400 auth_malformed for a jwt
// route's request with more than one Authorization field
// (WWW-Authenticate with invalid_request); 403 auth_forbidden for a valid
// token without a claim to forward (WWW-Authenticate with
// insufficient_scope); 429 auth_busy with Retry-After: 1 when
// a password would need a bcrypt slot and none is free; the auth
// service's own answer, as sent, when forward auth refused (a gRPC call
// gets its gRPC status instead: grpcOfDenial); 503 auth_unavailable when
// it could not be asked, or jwt had no usable key set; nothing (499) when the client left meanwhile. A
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
		g.obs.Metrics.Auth(rt.Pattern(), s.Method, s.Result, up.Name())
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
		if d.Challenge != "" {
			w.Header()["Www-Authenticate"] = []string{d.Challenge}
		}
		a := answer.AuthInvalid
		switch last.Result {
		case auth.ResultMissing:
			a = answer.AuthRequired
		case auth.ResultForbidden:
			a = answer.AuthForbidden
		case auth.ResultMalformed:
			a = answer.AuthMalformed
		}
		rec.finish(w, up, nil, a)
	}
	return false
}

// authFields are the access log's auth values, built once.
var authFields = func() map[auth.Step]string {
	m := map[auth.Step]string{}
	for _, method := range []string{auth.MethodAPIKey, auth.MethodBasic, auth.MethodJWT, auth.MethodForward} {
		for _, res := range []string{auth.ResultOK, auth.ResultMissing, auth.ResultDenied, auth.ResultMalformed, auth.ResultForbidden, auth.ResultUnavailable, auth.ResultCanceled, auth.ResultBusy} {
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
	rec.corsFields(h)
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
