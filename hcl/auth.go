package hcl

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"

	"github.com/impulse-agent/impulse-agent/internal/credfile"
)

// Edge authentication on routes (README "Edge authentication"): api_keys,
// basic_auth, jwt (jwt.go) and forward_auth blocks. The credential files are read at
// every load (validate, startup, reload): a reload that changes or removes
// a key or a user applies at once, and one whose file cannot be read or
// parsed fails at the file attribute, keeping the running configuration.

// Defaults of the authentication blocks.
const (
	DefaultAPIKeyHeader       = "X-Api-Key"
	DefaultBasicRealm         = "impulse-agent"
	DefaultForwardAuthTimeout = 2 * time.Second
	// MaxForwardAuthTimeout bounds forward_auth timeout: a request waits
	// that long before it is refused.
	MaxForwardAuthTimeout = time.Minute
)

// rawAPIKeys is upstream.route.api_keys.
type rawAPIKeys struct {
	DefRange hcl2.Range      `hcl:",def_range"`
	Header   *hcl2.Attribute `hcl:"header,optional"`
	KeysFile *hcl2.Attribute `hcl:"keys_file,optional"`
}

// rawBasicAuth is upstream.route.basic_auth.
type rawBasicAuth struct {
	DefRange  hcl2.Range      `hcl:",def_range"`
	UsersFile *hcl2.Attribute `hcl:"users_file,optional"`
	Realm     *hcl2.Attribute `hcl:"realm,optional"`
}

// rawForwardAuth is upstream.route.forward_auth.
type rawForwardAuth struct {
	DefRange            hcl2.Range      `hcl:",def_range"`
	Address             *hcl2.Attribute `hcl:"address,optional"`
	CopyRequestHeaders  *hcl2.Attribute `hcl:"copy_request_headers,optional"`
	CopyResponseHeaders *hcl2.Attribute `hcl:"copy_response_headers,optional"`
	Timeout             *hcl2.Attribute `hcl:"timeout,optional"`
}

func (r *rawAPIKeys) defRange() hcl2.Range     { return r.DefRange }
func (r *rawBasicAuth) defRange() hcl2.Range   { return r.DefRange }
func (r *rawForwardAuth) defRange() hcl2.Range { return r.DefRange }

// APIKeys is upstream.route.api_keys: requests must carry one of the keys
// of KeysFile in the field Header.
type APIKeys struct {
	// Header is the request field holding the key (default "X-Api-Key").
	Header string
	// KeysFile is the file as configured; Keys what it held at load
	// (credfile.ParseKeys: names and SHA-256 digests, never the keys).
	KeysFile string
	Keys     []credfile.Key
}

// BasicAuth is upstream.route.basic_auth: HTTP Basic (RFC 7617) against
// the bcrypt hashes of UsersFile.
type BasicAuth struct {
	// UsersFile is the file as configured; Users what it held at load
	// (credfile.ParseUsers).
	UsersFile string
	Users     []credfile.User
	// Realm is sent in WWW-Authenticate (default "impulse-agent").
	Realm string
}

// ForwardAuth is upstream.route.forward_auth: an HTTP service asked about
// every request first.
type ForwardAuth struct {
	// Address is the auth service's http or https URL (required).
	Address string
	// CopyRequestHeaders are request fields sent to the service (default
	// none besides X-Forwarded-*); CopyResponseHeaders fields of its 2xx
	// answer set on the request (default none).
	CopyRequestHeaders, CopyResponseHeaders []string
	// Timeout bounds one check (default 2s, 1ms..1m).
	Timeout time.Duration
}

// buildRouteAuth converts a route's authentication blocks into rt.
func buildRouteAuth(b blk, r *rawRoute, rt *Route) {
	if a := one(r.APIKeyss, b.path, "api_keys", b.diags); a != nil {
		rt.APIKeys = buildAPIKeys(b.child("api_keys", a.DefRange), a)
	}
	if a := one(r.BasicAuths, b.path, "basic_auth", b.diags); a != nil {
		rt.BasicAuth = buildBasicAuth(b.child("basic_auth", a.DefRange), a)
	}
	if a := one(r.JWTs, b.path, "jwt", b.diags); a != nil {
		rt.JWT = buildJWT(b.child("jwt", a.DefRange), a, rt) // jwt.go
	}
	if a := one(r.ForwardAuths, b.path, "forward_auth", b.diags); a != nil {
		rt.ForwardAuth = buildForwardAuth(b.child("forward_auth", a.DefRange), a)
	}
}

// credentialFile reads the credential file of attribute a (required) and
// parses it with parse; problems are errors at a, naming the file's line.
func credentialFile[T any](b blk, a *hcl2.Attribute, name string, parse func([]byte) ([]T, error)) (string, []T) {
	if a == nil {
		b.errorf(nil, name, "Missing "+name, "%s is required.", name)
		return "", nil
	}
	before := b.errCount()
	path, ok := b.fileOK(a)
	if path == "" && b.errCount() == before {
		b.errorf(a, "", "Missing "+name, "%s must not be empty.", name)
		return "", nil
	}
	if !ok {
		return path, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.errorf(a, "", "Unreadable file", "cannot read %q: %v.", path, unwrapPathError(err))
		return path, nil
	}
	items, err := parse(data)
	if err != nil {
		var le *credfile.LineError
		if errors.As(err, &le) {
			b.errorf(a, "", "Invalid "+name, "%s:%d: %s.", path, le.Line, le.Reason)
		} else {
			b.errorf(a, "", "Invalid "+name, "%q: %v.", path, err)
		}
		return path, nil
	}
	if len(items) == 0 {
		b.add(hcl2.DiagWarning, b.subject(a), "No credentials", b.field(name)+fmt.Sprintf(": %q holds none: every request of the route is refused with 401.", path))
	}
	return path, items
}

func buildAPIKeys(b blk, r *rawAPIKeys) *APIKeys {
	k := &APIKeys{Header: DefaultAPIKeyHeader}
	if h, ok := b.strOK(r.Header, DefaultAPIKeyHeader); ok {
		switch {
		case !isToken(h):
			b.errorf(r.Header, "", "Invalid header", "%q is not a field name (RFC 9110 §5.1).", h)
		case isReservedKeyHeader(h):
			b.errorf(r.Header, "", "Invalid header", "%q cannot carry an API key: the gateway, a proxy before it or HTTP itself uses it%s.", h, spelling(h))
		default:
			k.Header = h
		}
	}
	k.KeysFile, k.Keys = credentialFile(b, r.KeysFile, "keys_file", credfile.ParseKeys)
	return k
}

// fieldKey is h as the reserved-field checks compare it: lower-case, with
// "_" for "-". CGI, WSGI and PHP read "X_Forwarded_For" as the variable of
// X-Forwarded-For (HTTP_X_FORWARDED_FOR), and the gateway strips every
// such spelling of the fields it sets or reads (wire.DeleteSpellings): a
// check that let "_" through would accept a name the gateway deletes, or
// set a field that backends take for a reserved one.
func fieldKey(h string) string { return strings.ToLower(strings.ReplaceAll(h, "_", "-")) }

// spelling is the note a reserved-field message adds when h is written
// with "_": the name it stands for.
func spelling(h string) string {
	if !strings.Contains(h, "_") {
		return ""
	}
	return fmt.Sprintf(" (%q is read as %q by backends, and stripped as such by the gateway)", h, strings.ReplaceAll(h, "_", "-"))
}

// isHopOrFraming: the hop-by-hop fields (RFC 9110 §7.6.1: meant for one
// connection, removed by every proxy, HTTP/2 and HTTP/3 forbid them) and
// the fields that frame a message (Content-Length, Transfer-Encoding):
// none can be copied to or from an auth service, nor carry a key. Like
// every reserved-field check, it compares fieldKey(h).
func isHopOrFraming(h string) bool {
	switch fieldKey(h) {
	case "connection", "proxy-connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
		"http2-settings", "proxy-authenticate", "proxy-authorization", "content-length":
		return true
	}
	return false
}

// isReservedAuthHeader: fields forward auth must not set on a request
// (copy_response_headers): hop-by-hop and framing fields, Host, Cookie and
// the gateway's x-request-id.
func isReservedAuthHeader(h string) bool {
	switch fieldKey(h) {
	case "host", "x-request-id", "cookie":
		return true
	}
	return isHopOrFraming(h)
}

// isReservedKeyHeader: fields an API key must not be read from: those of
// isReservedAuthHeader, and Forwarded and X-Forwarded-* (set or appended
// by proxies before the gateway, and by the gateway itself: a key there
// would be logged and forwarded as a client address or a scheme).
func isReservedKeyHeader(h string) bool {
	l := fieldKey(h)
	return isReservedAuthHeader(h) || l == "forwarded" || strings.HasPrefix(l, "x-forwarded-")
}

func buildBasicAuth(b blk, r *rawBasicAuth) *BasicAuth {
	ba := &BasicAuth{Realm: b.realm(r.Realm)}
	ba.UsersFile, ba.Users = credentialFile(b, r.UsersFile, "users_file", credfile.ParseUsers)
	return ba
}

// realm is a realm attribute of basic_auth or jwt (DefaultBasicRealm when
// absent or invalid): non-empty printable ASCII without quotes or
// backslashes, so that it is a quoted-string in WWW-Authenticate as is.
func (b blk) realm(a *hcl2.Attribute) string {
	realm, ok := b.strOK(a, DefaultBasicRealm)
	if !ok {
		return DefaultBasicRealm
	}
	if realm == "" || strings.ContainsFunc(realm, func(c rune) bool { return c < ' ' || c == 0x7f || c == '"' || c == '\\' || c > 0x7e }) {
		b.errorf(a, "", "Invalid realm", "must be non-empty printable ASCII without quotes or backslashes.")
		return DefaultBasicRealm
	}
	return realm
}

func buildForwardAuth(b blk, r *rawForwardAuth) *ForwardAuth {
	f := &ForwardAuth{Timeout: DefaultForwardAuthTimeout}
	switch addr, ok := b.strOK(r.Address, ""); {
	case r.Address == nil:
		b.errorf(nil, "address", "Missing address", "address is required, as in \"http://127.0.0.1:4181\".")
	case ok:
		if why := checkForwardAddress(addr); why != "" {
			b.errorf(r.Address, "", "Invalid address", "%s; got %q.", why, redactURL(addr))
		} else {
			f.Address = addr
		}
	}
	fieldName := func(h string) string {
		if !isToken(h) {
			return fmt.Sprintf("%q is not a field name (RFC 9110 §5.1)", h)
		}
		return ""
	}
	f.CopyRequestHeaders = b.strList(r.CopyRequestHeaders, func(h string) string {
		if why := fieldName(h); why != "" {
			return why
		}
		if isHopOrFraming(h) || fieldKey(h) == "host" {
			return fmt.Sprintf("%q cannot be copied to the auth service: it belongs to one connection or frames one message (RFC 9110 §7.6.1; the service gets the host as X-Forwarded-Host)%s", h, spelling(h))
		}
		return ""
	})
	f.CopyResponseHeaders = b.strList(r.CopyResponseHeaders, func(h string) string {
		if why := fieldName(h); why != "" {
			return why
		}
		if isReservedAuthHeader(h) {
			return fmt.Sprintf("%q cannot be set on the request%s", h, spelling(h))
		}
		return ""
	})
	f.Timeout = b.duration(r.Timeout, DefaultForwardAuthTimeout, time.Millisecond, MaxForwardAuthTimeout)
	return f
}

// checkForwardAddress says why s is not a forward_auth address: an
// absolute http or https URL with a host, without user info or fragment.
func checkForwardAddress(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "not a URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "the scheme must be http or https"
	case u.Host == "":
		return "no host"
	case u.User != nil:
		return "user info is not allowed (send credentials with copy_request_headers)"
	case strings.Contains(s, "#"):
		return "a fragment is not allowed"
	}
	return ""
}
