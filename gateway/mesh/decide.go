package mesh

import (
	"net/http"
	"strings"

	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

// Request is what an L7 decision looks at. Build it once per request; the
// decision keeps no reference to it.
type Request struct {
	// Method is the request method, as sent (case-sensitive).
	Method string
	// Path is the request path from RequestPath (no query).
	Path string
	// Host is the request's authority (Host or :authority).
	Host string
	// Header is the request's header fields, keys in canonical form as
	// net/http and quic-go's http3 give them.
	Header http.Header
}

// RequestPath returns the path intentions match a request-target's path
// (raw, as sent, without the query) against: the gateway's own normal form
// (pathnorm.NormalizePath with the listener's options o: escapes
// normalised, unreserved characters decoded, dot-segments removed) with
// runs of "/" always merged. So "//admin", "/api/../admin" and "/%61dmin"
// are all decided as "/admin" is; "/ADMIN" is not, as Consul's (Envoy's)
// path matching is case-sensitive. A path already in that form is returned
// without allocating. Errors wrap pathnorm.ErrInvalidPath: the request
// must be refused (400) before any decision.
func RequestPath(raw string, o pathnorm.PathOptions) (string, error) {
	o.MergeSlashes = true
	return pathnorm.NormalizePath(raw, o)
}

// Verdict is how a decision was reached.
type Verdict uint8

const (
	// ByDefault: no intention's source matched; the ACL default policy.
	ByDefault Verdict = iota
	// ByL4: an L4 intention.
	ByL4
	// ByPermission: the first matching permission of an L7 intention.
	ByPermission
	// ByL7Default: an L7 intention whose permissions all missed; Consul
	// then applies the default ("traffic that fails to match any of the
	// provided permissions in this intention will be subject to the
	// default intention behavior", service-intentions reference).
	ByL7Default
	// ByInvalid: an intention Compile reported as a Problem; it denies.
	ByInvalid
	// ByAmbiguousPath: the path, read with its ";" parameters dropped as
	// servlet containers do (pathnorm.LaxReading), is decided otherwise;
	// denied so a deny on "/admin" also covers "/admin;x".
	ByAmbiguousPath
	// NeedsRequest (AuthorizeConn only): an L7 intention matched the
	// source; the connection is allowed and every request decided.
	NeedsRequest
)

var verdictNames = [...]string{"default", "l4", "permission", "l7_default", "invalid", "ambiguous_path", "needs_request"}

// String returns the verdict's name, e.g. "permission".
func (v Verdict) String() string { return verdictNames[v] }

// Decision is the outcome of an authorization. It holds only values from
// the immutable Rules, so returning it does not allocate.
type Decision struct {
	Allow bool
	By    Verdict
	// Intention is the deciding intention's ID ("" for ByDefault).
	Intention string
	// Permission is the index of the deciding permission (ByPermission),
	// else -1.
	Permission int
}

// DefaultAllow reports the default decision of r.
func (r *Rules) DefaultAllow() bool { return r.defaultAllow }

// Len returns the number of intentions in r.
func (r *Rules) Len() int { return len(r.ixns) }

// find returns the first intention, in precedence order, whose source
// matches src, or nil: the first of src's exact-name intentions and the
// first of the wildcard ones that match, whichever comes first.
func (r *Rules) find(src ServiceID) *rule {
	best := -1
	for _, i := range r.byName[src.Service] {
		if r.ixns[i].sourceMatches(src) {
			best = i
			break
		}
	}
	for _, i := range r.wild {
		if best >= 0 && i > best {
			break
		}
		if r.ixns[i].sourceMatches(src) {
			best = i
			break
		}
	}
	if best < 0 {
		return nil
	}
	return &r.ixns[best]
}

// sourceMatches reports whether ru's source covers src: same partition
// (no wildcard), same namespace or "*", same name or "*"; a peer's
// intention never covers a local identity.
func (ru *rule) sourceMatches(src ServiceID) bool {
	return ru.peer == "" && ru.ap == src.partition() && (ru.ns == "*" || ru.ns == src.namespace()) &&
		(ru.name == "*" || ru.name == src.Service)
}

// AuthorizeConn decides a new connection of src at the handshake, from the
// L4 intentions: the winning intention's action, or NeedsRequest (allowed)
// when it is an L7 one, or the default. It does not allocate.
func (r *Rules) AuthorizeConn(src ServiceID) Decision {
	ru := r.find(src)
	switch {
	case ru == nil:
		return Decision{Allow: r.defaultAllow, By: ByDefault, Permission: -1}
	case ru.l7:
		return Decision{Allow: true, By: NeedsRequest, Intention: ru.id, Permission: -1}
	}
	return r.l4(ru)
}

func (r *Rules) l4(ru *rule) Decision {
	by := ByL4
	if ru.bad {
		by = ByInvalid
	}
	return Decision{Allow: ru.l4, By: by, Intention: ru.id, Permission: -1}
}

// Authorize decides one request of src: the first intention (in precedence
// order) whose source matches src decides; an L4 one by its action, an L7
// one by its first matching permission, or the default when none matches;
// without a matching intention, the default. L4 intentions are applied to
// every request too, so a change reaches open connections. req.Path must
// come from RequestPath. It does not allocate, except to join a header
// field sent several times that a permission matches on, and to read a
// path holding ";" leniently.
func (r *Rules) Authorize(src ServiceID, req *Request) Decision {
	ru := r.find(src)
	if ru == nil {
		return Decision{Allow: r.defaultAllow, By: ByDefault, Permission: -1}
	}
	if !ru.l7 {
		return r.l4(ru)
	}
	d := r.permissions(ru, req, req.Path)
	if strings.IndexByte(req.Path, ';') >= 0 {
		if lax, ok := pathnorm.LaxReading(req.Path); ok {
			if o := r.permissions(ru, req, lax); o.Allow != d.Allow {
				return Decision{Allow: false, By: ByAmbiguousPath, Intention: ru.id, Permission: -1}
			}
		}
	}
	return d
}

func (r *Rules) permissions(ru *rule, req *Request, path string) Decision {
	for i := range ru.perms {
		if p := &ru.perms[i]; p.matches(req, path) {
			return Decision{Allow: p.allow, By: ByPermission, Intention: ru.id, Permission: i}
		}
	}
	return Decision{Allow: r.defaultAllow, By: ByL7Default, Intention: ru.id, Permission: -1}
}
