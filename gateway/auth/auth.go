// Package auth holds the edge authentication policies of a route (README
// "Edge authentication"): API keys in a header, HTTP Basic with bcrypt
// hashes (RFC 7617), JWT bearer tokens (RFC 7519, RFC 6750) verified with
// a key set (jwt.go, jwksremote.go) and forward auth (an HTTP service
// asked first, as Traefik's ForwardAuth). Each policy is a small type whose decision is a
// function of the request and its configuration (forward auth's of the
// auth service's answer); the pipeline (package gateway) answers and
// records. Nothing here logs, and no decision, error or String method
// carries a key, a password or a hash.
package auth

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/credfile"
)

// Methods: the method label of impulse_auth and the part of the access
// log's auth field before ":".
const (
	MethodAPIKey  = "api_key"
	MethodBasic   = "basic"
	MethodJWT     = "jwt"
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
	// ResultDenied: wrong or malformed credentials (jwt: a token that is
	// not valid; forward auth: the service answered something other than
	// 2xx).
	ResultDenied = "denied"
	// ResultMalformed: jwt only: the request is malformed for bearer
	// authentication, more than one Authorization field (400
	// invalid_request, RFC 6750 §3.1: it "repeats the same parameter").
	ResultMalformed = "malformed"
	// ResultForbidden: jwt only: a valid token without a claim the route
	// forwards (403 insufficient_scope, RFC 6750 §3.1).
	ResultForbidden = "forbidden"
	// ResultUnavailable: forward auth could not get an answer (connection
	// failure, timeout, an answer too large); jwt had no usable key set
	// (never fetched, or last fetched over JWKSStaleAfter ago).
	ResultUnavailable = "unavailable"
	// ResultCanceled: the client went away while forward auth was asked,
	// a password was compared or a key set was fetched.
	ResultCanceled = "canceled"
	// ResultBusy: basic_auth had to compare a password with bcrypt and
	// every slot of the process was taken (bcrypt.go): nothing was
	// compared, the pipeline answers 429 auth_busy.
	ResultBusy = "busy"
)

// Config is a route's authentication: every block set must pass, in the
// order api_keys, basic_auth, jwt, forward_auth (the local checks before
// the remote one; jwt after the cheaper ones, and it may wait for a key
// set fetch); the first that refuses answers. Basic and JWT both read
// Authorization, so a route has at most one of them (New refuses both).
// The zero value is no authentication.
type Config struct {
	APIKeys *APIKeysConfig
	Basic   *BasicConfig
	JWT     *JWTConfig
	Forward *ForwardConfig
}

// Methods names the methods c asks for, in the order they run (the
// Method constants); nil when none.
func (c Config) Methods() []string {
	var out []string
	for _, m := range []struct {
		set  bool
		name string
	}{{c.APIKeys != nil, MethodAPIKey}, {c.Basic != nil, MethodBasic}, {c.JWT != nil, MethodJWT}, {c.Forward != nil, MethodForward}} {
		if m.set {
			out = append(out, m.name)
		}
	}
	return out
}

// Empty reports whether c asks for no authentication.
func (c Config) Empty() bool {
	return c.APIKeys == nil && c.Basic == nil && c.JWT == nil && c.Forward == nil
}

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
// user, a named API key, a token's "sub"; "" otherwise). Denial is the
// auth service's answer to relay when forward auth refused (nil
// otherwise). Challenge is the WWW-Authenticate value of a 401 or 403
// refusal by basic_auth or jwt, or of jwt's 400 ("" otherwise: an API key in a header has
// no registered scheme, RFC 9110 §11.6.1 notwithstanding; README "Edge
// authentication").
type Decision struct {
	Steps     [4]Step
	N         int
	Subject   string
	Denial    *Denial
	Challenge string
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
// request; the caller closes its Forward and RemoteKeys when no policy
// uses them any more.
type Policy struct {
	apiKeys *apiKeys
	basic   *basic
	jwt     *jwtAuth
	forward *Forward
}

// Shared are the parts of a policy that hold connections and state worth
// keeping across reloads, made by the caller (nil: New makes them):
// Forward for Config.Forward, Keys for Config.JWT's jwks_url. OnFetch is
// given to the RemoteKeys New makes. Carry, when New makes a RemoteKeys,
// is the one it replaces (the same issuer's, before a reload changed its
// jwks_url or jwks_ca_file): its last good set verifies until the new
// one's first successful fetch, within its stale bound.
type Shared struct {
	Forward *Forward
	Keys    *RemoteKeys
	OnFetch func(FetchReport)
	Carry   *RemoteKeys
}

// New compiles c. Errors: an invalid forward_auth address or timeout, a
// jwt block without exactly one key source or with an invalid jwks_url,
// basic_auth and jwt on one route. On error nothing New made is left
// running.
func New(c Config, shared Shared) (*Policy, error) {
	p := &Policy{}
	if c.APIKeys != nil {
		p.apiKeys = newAPIKeys(*c.APIKeys)
	}
	if c.Basic != nil {
		p.basic = newBasic(*c.Basic)
	}
	if c.JWT != nil {
		if c.Basic != nil {
			return nil, errors.New("auth: basic_auth and jwt both read Authorization; a route has one of them")
		}
		j := *c.JWT
		if (j.Keys == nil) == (j.JWKSURL == "") {
			return nil, errors.New("auth: jwt needs exactly one of a key set (jwks_file) and a jwks_url")
		}
		keys := shared.Keys
		if j.JWKSURL != "" && keys == nil {
			k, err := newRemoteKeys(j, shared.OnFetch, shared.Carry)
			if err != nil {
				return nil, err
			}
			keys = k
		}
		if j.JWKSURL == "" {
			keys = nil
		}
		p.jwt = newJWT(j, keys)
	}
	if c.Forward != nil {
		forward := shared.Forward
		if forward == nil {
			f, err := NewForward(*c.Forward)
			if err != nil {
				if p.jwt != nil && p.jwt.remote != nil && p.jwt.remote != shared.Keys {
					p.jwt.remote.Close()
				}
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

// Issuer is the issuer of the policy's jwt ("" without one).
func (p *Policy) Issuer() string {
	if p.jwt == nil {
		return ""
	}
	return p.jwt.issuer
}

// Keys is the policy's remote key set (nil: none, or a jwks_file).
func (p *Policy) Keys() *RemoteKeys {
	if p.jwt == nil {
		return nil
	}
	return p.jwt.remote
}

// Authenticate decides on r. On success the credential fields of
// api_keys, basic_auth and jwt are removed from r.Header, in every
// spelling a backend may read as the same (deleteSpellings: they never
// reach the backend), and jwt's forwarded claims and forward auth's
// copied fields are set on it (a client's own fields of those names are
// removed whatever the verdict). uri is the request
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
			if res == ResultMissing || res == ResultDenied {
				d.Challenge = p.basic.challenge
			}
			return d
		}
		d.Subject = subject
	}
	if p.jwt != nil {
		res, subject, challenge := p.jwt.check(ctx, r.Header)
		d.add(MethodJWT, res)
		if res != ResultOK {
			d.Challenge = challenge
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
	if p.basic != nil || p.jwt != nil {
		deleteSpellings(r.Header, "Authorization")
	}
	return d
}
