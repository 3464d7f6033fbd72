// Package auth holds the edge authentication policies of a route (README
// "Edge authentication"): API keys in a header, HTTP Basic with bcrypt
// hashes (RFC 7617) and forward auth (an HTTP service asked first, as
// Traefik's ForwardAuth). Each policy is a small type whose decision is a
// function of the request and its configuration (forward auth's of the
// auth service's answer); the pipeline (package gateway) answers and
// records. Nothing here logs, and no decision, error or String method
// carries a key, a password or a hash.
package auth

import (
	"context"
	"net/http"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/credfile"
)

// Methods: the method label of impulse_auth and the part of the access
// log's auth field before ":".
const (
	MethodAPIKey  = "api_key"
	MethodBasic   = "basic"
	MethodForward = "forward"
)

// Results: the result label of impulse_auth and the part of the access
// log's auth field after ":".
const (
	// ResultOK: the credentials were verified (forward auth: the service
	// answered 2xx).
	ResultOK = "ok"
	// ResultMissing: the request carried no credentials for the method.
	ResultMissing = "missing"
	// ResultDenied: wrong or malformed credentials (forward auth: the
	// service answered something other than 2xx).
	ResultDenied = "denied"
	// ResultUnavailable: forward auth could not get an answer (connection
	// failure, timeout, an answer too large).
	ResultUnavailable = "unavailable"
	// ResultCanceled: the client went away while forward auth was asked
	// or a password was compared.
	ResultCanceled = "canceled"
	// ResultBusy: basic_auth had to compare a password with bcrypt and
	// every slot of the process was taken (bcrypt.go): nothing was
	// compared, the pipeline answers 429 auth_busy.
	ResultBusy = "busy"
)

// Config is a route's authentication: every block set must pass, in the
// order api_keys, basic_auth, forward_auth (local checks before the
// remote one); the first that refuses answers. The zero value is no
// authentication.
type Config struct {
	APIKeys *APIKeysConfig
	Basic   *BasicConfig
	Forward *ForwardConfig
}

// Empty reports whether c asks for no authentication.
func (c Config) Empty() bool { return c.APIKeys == nil && c.Basic == nil && c.Forward == nil }

// APIKeysConfig is a route's api_keys block: the request field that
// carries the key (Header, canonicalised) and the keys (credfile.ParseKeys;
// only their digests).
type APIKeysConfig struct {
	Header string
	Keys   []credfile.Key
}

// BasicConfig is a route's basic_auth block: the realm sent in
// WWW-Authenticate (RFC 7617 §2) and the users (credfile.ParseUsers).
type BasicConfig struct {
	Realm string
	Users []credfile.User
}

// ForwardConfig is a route's forward_auth block.
type ForwardConfig struct {
	// Address is the auth service's URL (http or https); every check is a
	// GET of it.
	Address string
	// CopyRequestHeaders are the request fields sent to the auth service
	// besides the X-Forwarded-* ones (none when empty).
	CopyRequestHeaders []string
	// CopyResponseHeaders are the fields of a 2xx answer set on the
	// request before it goes on; a client's own fields of these names are
	// removed first, so a client cannot forge them.
	CopyResponseHeaders []string
	// Timeout bounds one check, the answer's body included (> 0).
	Timeout time.Duration
}

// Step is one method's verdict on a request.
type Step struct {
	Method, Result string
}

// Decision is a route's verdict on a request: Steps are the methods asked,
// in order (the last one decided); Subject names who was let in (a basic
// user, a named API key; "" otherwise). Denial is the auth service's
// answer to relay when forward auth refused (nil otherwise).
type Decision struct {
	Steps   [3]Step
	N       int
	Subject string
	Denial  *Denial
}

// Last is the deciding step.
func (d *Decision) Last() Step { return d.Steps[d.N-1] }

// OK reports whether every method let the request in.
func (d *Decision) OK() bool { return d.N > 0 && d.Last().Result == ResultOK }

func (d *Decision) add(method, result string) {
	d.Steps[d.N] = Step{method, result}
	d.N++
}

// Policy is a route's compiled Config. Use New, then Authenticate per
// request; Close when the route is gone (forward auth's connections).
type Policy struct {
	apiKeys *apiKeys
	basic   *basic
	forward *Forward
}

// New compiles c; forward, when not nil, is the Forward to use for
// c.Forward (one kept across reloads by the caller). Errors: an invalid
// forward_auth address or timeout.
func New(c Config, forward *Forward) (*Policy, error) {
	p := &Policy{}
	if c.APIKeys != nil {
		p.apiKeys = newAPIKeys(*c.APIKeys)
	}
	if c.Basic != nil {
		p.basic = newBasic(*c.Basic)
	}
	if c.Forward != nil {
		if forward == nil {
			f, err := NewForward(*c.Forward)
			if err != nil {
				return nil, err
			}
			forward = f
		}
		p.forward = forward
	}
	return p, nil
}

// Forward is the policy's forward auth (nil: none).
func (p *Policy) Forward() *Forward { return p.forward }

// Authenticate decides on r. On success the credential fields of api_keys
// and basic_auth are removed from r.Header, in every spelling a backend
// may read as the same (deleteSpellings: they never reach the backend),
// and forward auth's copied fields are set on it. uri is the request
// target forward auth describes as X-Forwarded-Uri: the path the route
// matched (normalized, README "Paths") and the query as sent.
func (p *Policy) Authenticate(ctx context.Context, r *http.Request, uri string) Decision {
	var d Decision
	if p.apiKeys != nil {
		res, subject := p.apiKeys.check(r.Header)
		d.add(MethodAPIKey, res)
		if res != ResultOK {
			return d
		}
		d.Subject = subject
	}
	if p.basic != nil {
		res, subject := p.basic.check(ctx, r.Header, time.Now())
		d.add(MethodBasic, res)
		if res != ResultOK {
			return d
		}
		d.Subject = subject
	}
	if p.forward != nil {
		res, denial := p.forward.check(ctx, r, uri)
		d.add(MethodForward, res)
		d.Denial = denial
		if res != ResultOK {
			return d
		}
	}
	if p.apiKeys != nil {
		deleteSpellings(r.Header, p.apiKeys.header)
	}
	if p.basic != nil {
		deleteSpellings(r.Header, "Authorization")
	}
	return d
}

// Challenge is the WWW-Authenticate value of a 401 refusal by basic_auth
// ("" for the other methods: an API key in a header has no registered
// scheme, RFC 9110 §11.6.1 notwithstanding; README "Edge authentication").
func (p *Policy) Challenge(method string) string {
	if method == MethodBasic && p.basic != nil {
		return p.basic.challenge
	}
	return ""
}
