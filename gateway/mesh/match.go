package mesh

import (
	"strings"
	"unicode/utf8"
)

// matches reports whether p's criteria all hold for req, its path read as
// path.
func (p *perm) matches(req *Request, path string) bool {
	switch p.path.kind {
	case pathExact:
		if path != p.path.s {
			return false
		}
	case pathPrefix:
		if !strings.HasPrefix(path, p.path.s) {
			return false
		}
	case pathRegex:
		if !p.path.re.MatchString(path) {
			return false
		}
	}
	if len(p.methods) > 0 {
		found := false
		for _, m := range p.methods {
			if m == req.Method {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	for i := range p.headers {
		if !p.headers[i].matches(req) {
			return false
		}
	}
	return true
}

// matches applies Envoy's HeaderMatcher rules (source/common/http/
// header_utility.cc, matchHeaders): an absent header matches only an
// inverted "present"; values sent several times are joined with ",";
// otherwise the comparison's result, inverted when asked.
func (h *headerMatch) matches(req *Request) bool {
	var v string
	switch {
	case h.name == ":authority":
		if req.Host == "" {
			return h.inv && h.kind == hdrPresent
		}
		v = req.Host
	default:
		vs := req.Header[h.name]
		switch len(vs) {
		case 0:
			return h.inv && h.kind == hdrPresent
		case 1:
			v = vs[0]
		default:
			v = strings.Join(vs, ",")
		}
	}
	var m bool
	switch h.kind {
	case hdrPresent:
		m = true
	case hdrExact:
		m = v == h.s || h.fold && strings.EqualFold(v, h.s)
	case hdrPrefix:
		m = strings.HasPrefix(v, h.s) || h.fold && len(v) >= len(h.s) && strings.EqualFold(v[:len(h.s)], h.s)
	case hdrSuffix:
		m = strings.HasSuffix(v, h.s) || h.fold && len(v) >= len(h.s) && strings.EqualFold(v[len(v)-len(h.s):], h.s)
	case hdrContains:
		m = strings.Contains(v, h.s) || h.fold && containsFold(v, h.s)
	case hdrRegex:
		m = h.re.MatchString(v)
	}
	return m != h.inv
}

// containsFold reports whether sub is within s under Unicode case folding,
// without allocating.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		i += n
	}
	return false
}
