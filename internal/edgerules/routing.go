package edgerules

import (
	"fmt"
	"net/url"
	"regexp"
	"regexp/syntax"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

// Checks of the path, header and redirect rules of a route (README "Path
// rewrites", "Header rules", "Redirects"), made by hcl at load and by the
// gateway when a config is applied.

// CheckRewrite says why p cannot be a route's prefix_rewrite, or returns
// "": it must be a path in normal form (pathnorm.NormalizePath with the
// default options returns it unchanged: it starts with "/", has no
// dot-segment, no escaped slash and only upper-case escapes) without
// an empty segment ("//", which merge_slashes would change), so that a
// rewritten path is one the route table would have taken (FuzzRewrite).
func CheckRewrite(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("%q does not start with \"/\"", p)
	case strings.Contains(p, "//"):
		return fmt.Sprintf("%q has an empty segment (\"//\")", p)
	}
	norm, err := pathnorm.NormalizePath(p, pathnorm.PathOptions{})
	if err != nil {
		return fmt.Sprintf("%q: %v", p, err)
	}
	if norm != p {
		return fmt.Sprintf("%q is not in normal form; write %q", p, norm)
	}
	return ""
}

// HeaderVariables are the names a header rule's value may use as
// "{name}": the client's IP address (as the listener settled it), the
// request's x-request-id, its host (:authority or Host, as sent), its
// scheme ("https", or "http" on a plaintext listener) and the route (its
// path_prefix).
var HeaderVariables = []string{"client_ip", "request_id", "host", "scheme", "route"}

// forbiddenHeaders are the fields no header rule may set, add or remove,
// lower-cased and with "-" for "_": hop-by-hop fields (RFC 9110 §7.6.1),
// the message's framing and length (the gateway and its transports own
// them), Host (routing), the gateway's own x-request-id, and, on requests,
// the forwarding fields the gateway sets itself.
var forbiddenHeaders = map[string]string{
	"connection":          "a hop-by-hop field (RFC 9110 §7.6.1)",
	"proxy-connection":    "a hop-by-hop field (RFC 9110 §7.6.1)",
	"keep-alive":          "a hop-by-hop field (RFC 9110 §7.6.1)",
	"te":                  "a hop-by-hop field (RFC 9110 §7.6.1)",
	"trailer":             "a hop-by-hop field (RFC 9110 §7.6.1)",
	"upgrade":             "a hop-by-hop field (RFC 9110 §7.6.1)",
	"proxy-authenticate":  "a hop-by-hop field (RFC 9110 §7.6.1)",
	"proxy-authorization": "a hop-by-hop field (RFC 9110 §7.6.1)",
	"http2-settings":      "a hop-by-hop field (RFC 9113 §3.2.1)",
	"transfer-encoding":   "message framing, set by the transport",
	"content-length":      "message framing, set by the transport",
	"content-encoding":    "how the body is encoded (the compress block owns it)",
	"host":                "the request's authority, which routing and the backend rely on",
	"x-request-id":        "the gateway's own request ID",
}

// forbiddenRequestHeaders are also refused on requests: the gateway sets
// them on every try.
var forbiddenRequestHeaders = map[string]string{
	"forwarded":         "set by the gateway on every try",
	"x-forwarded-for":   "set by the gateway on every try",
	"x-forwarded-proto": "set by the gateway on every try",
	"x-forwarded-host":  "set by the gateway on every try",
	"early-data":        "the gateway's 0-RTT mark (RFC 8470)",
}

// CheckHeaderRuleName says why a header rule (request_headers when
// request, response_headers otherwise) cannot touch field name, or returns
// "": it must be a field name (RFC 9110 §5.1) that is neither a
// pseudo-header nor a field the gateway owns (forbiddenHeaders). "_" is
// read as "-": many servers (CGI, WSGI, Rack) fold the two, so
// X_Forwarded_For is judged as X-Forwarded-For.
func CheckHeaderRuleName(name string, request bool) string {
	if strings.HasPrefix(name, ":") {
		return fmt.Sprintf("%q is a pseudo-header: routing and the transport own them", name)
	}
	if why := CheckHeader(name); why != "" {
		return why
	}
	key := strings.ReplaceAll(strings.ToLower(name), "_", "-")
	if why, ok := forbiddenHeaders[key]; ok {
		return fmt.Sprintf("%q cannot be changed: %s", name, why)
	}
	if request {
		if why, ok := forbiddenRequestHeaders[key]; ok {
			return fmt.Sprintf("%q cannot be changed on the request: %s", name, why)
		}
	}
	return ""
}

// ValuePart is one piece of a header rule's value: literal text, or a
// variable (Var is one of HeaderVariables; Text is then empty).
type ValuePart struct {
	Text, Var string
}

// ParseHeaderValue splits a header rule's value into literal text and
// "{name}" variables, or says why it is not a valid value: a "{" followed
// by lower-case letters and "_" and a "}" must name one of
// HeaderVariables; any other "{" or "}" is literal text. The text must be
// a valid field value (RFC 9110 §5.5: no control byte but tab, no
// leading or trailing space).
func ParseHeaderValue(v string) ([]ValuePart, string) {
	if !httpguts.ValidHeaderFieldValue(v) || v != strings.Trim(v, " \t") {
		return nil, fmt.Sprintf("%q is not a field value (RFC 9110 §5.5: no control bytes, no leading or trailing space)", v)
	}
	var parts []ValuePart
	lit := 0
	for i := 0; i < len(v); i++ {
		if v[i] != '{' {
			continue
		}
		j := i + 1
		for j < len(v) && (v[j] == '_' || 'a' <= v[j] && v[j] <= 'z') {
			j++
		}
		if j == i+1 || j == len(v) || v[j] != '}' {
			continue // literal "{"
		}
		name := v[i+1 : j]
		known := false
		for _, n := range HeaderVariables {
			known = known || n == name
		}
		if !known {
			return nil, fmt.Sprintf("%q: {%s} is not a variable; use {%s}", v, name, strings.Join(HeaderVariables, "}, {"))
		}
		if lit < i {
			parts = append(parts, ValuePart{Text: v[lit:i]})
		}
		parts = append(parts, ValuePart{Var: name})
		lit, i = j+1, j
	}
	if lit < len(v) || len(parts) == 0 {
		parts = append(parts, ValuePart{Text: v[lit:]})
	}
	return parts, ""
}

// RedirectCodes are the statuses a redirect may answer with.
var RedirectCodes = []int{301, 302, 307, 308}

// CheckRedirectTo says why to cannot be a redirect's target, or returns
// "": an absolute http or https URL with a host, without user info or
// fragment ("https://new.example.com", "https://new.example.com/base").
func CheckRedirectTo(to string) string {
	u, err := url.Parse(to)
	switch {
	case err != nil:
		return fmt.Sprintf("%q is not a URL: %v", to, err)
	case u.Scheme == "":
		return fmt.Sprintf("%q has no scheme; write \"https://%s\"", to, strings.TrimPrefix(to, "//"))
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Sprintf("%q: the scheme must be http or https", to)
	case u.Host == "" || u.Opaque != "":
		return fmt.Sprintf("%q has no host", to)
	case u.User != nil:
		return fmt.Sprintf("%q: a redirect target has no user info", to)
	case u.Fragment != "" || strings.Contains(to, "#"):
		return fmt.Sprintf("%q: a redirect target has no fragment", to)
	case !httpguts.ValidHeaderFieldValue(to) || strings.ContainsAny(to, " \t"):
		return fmt.Sprintf("%q cannot be sent in Location", to)
	}
	return ""
}

// Bounds of a path_regex. RE2 matches in time linear in the path and the
// program: a path longer than MaxRegexPathBytes never matches a
// path_regex route (the route table leaves it to the prefix routes), and
// a pattern may be at most MaxRegexBytes long and compile to at most
// MaxRegexInsts instructions. Together they bound one match to about two
// million steps.
const (
	MaxRegexPathBytes = 1024
	MaxRegexBytes     = 1024
	MaxRegexInsts     = 2000
)

// CompilePathRegex compiles a path_regex: RE2 syntax (Go's regexp, Perl
// flags), matched whole (anchored at both ends) against the normalised
// path in its escaped form, within MaxRegexBytes and MaxRegexInsts.
// Errors say why, as regexp/syntax does for a pattern that does not
// compile.
func CompilePathRegex(s string) (*regexp.Regexp, error) {
	if len(s) > MaxRegexBytes {
		return nil, fmt.Errorf("%d bytes, more than %d", len(s), MaxRegexBytes)
	}
	if _, err := syntax.Parse(s, syntax.Perl); err != nil { // its errors quote s, not the anchored form
		return nil, err
	}
	anchored := `^(?:` + s + `)$`
	re, err := syntax.Parse(anchored, syntax.Perl)
	if err != nil { // unreachable once s parses
		return nil, err
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil, err
	}
	if len(prog.Inst) > MaxRegexInsts {
		return nil, fmt.Errorf("compiles to %d instructions, more than %d: simplify it", len(prog.Inst), MaxRegexInsts)
	}
	return regexp.Compile(anchored)
}
