package mesh

import (
	"cmp"
	"errors"
	"fmt"
	"net/textproto"
	"regexp"
	"slices"
	"strings"
)

// Intention is one Consul intention whose destination is the local service,
// as the agent converts it from discovery (Consul's /v1/connect/intentions/
// match, or the service-intentions config entry's sources). Field meanings
// follow Consul's "service-intentions" configuration entry reference.
type Intention struct {
	// ID names the intention in decisions and problems; when empty,
	// "<source> -> <destination>" is used.
	ID string
	// Source: SourceName is a service name or "*"; SourceNS a namespace
	// or "*" ("" is "default"); SourcePartition "" is "default" (no
	// wildcard). SourcePeer, set for a source in a peered cluster, never
	// matches a local identity (peer trust bundles are not handled).
	SourcePeer, SourcePartition, SourceNS, SourceName string
	// DestinationNS and DestinationName ("*" wildcards) only serve to
	// compute a missing Precedence.
	DestinationNS, DestinationName string
	// Action is "allow" or "deny" for an L4 intention; "" with
	// Permissions (an L7 intention).
	Action string
	// Permissions are an L7 intention's permissions, in order: the first
	// that matches a request decides it.
	Permissions []Permission
	// Precedence is Consul's value (9 for exact source and destination
	// down to 1); 0 computes it from the names (Consul
	// Intention.UpdatePrecedence).
	Precedence int
}

// Permission is one L7 permission (Consul "IntentionPermission").
type Permission struct {
	// Action is "allow" or "deny".
	Action string
	// HTTP is what a request must match; nil matches every request.
	HTTP *HTTPMatch
	// Unsupported, when set, names a requirement this gateway cannot check
	// (e.g. "JWT"): the intention denies, and a Problem reports it.
	Unsupported string
}

// HTTPMatch is a permission's HTTP criteria (Consul
// "IntentionHTTPPermission"): every part that is set must match.
type HTTPMatch struct {
	// At most one of PathExact, PathPrefix, PathRegex. The path matched is
	// the request's after normalisation (RequestPath). PathRegex is RE2
	// (Go's regexp) and must match the whole path.
	PathExact, PathPrefix, PathRegex string
	// Header: every entry must match.
	Header []HeaderMatch
	// Methods: the request's method must be one of them; empty matches any.
	Methods []string
}

// HeaderMatch matches one request header (Consul
// "IntentionHTTPHeaderPermission"; Contains and IgnoreCase from Consul 1.16).
// Exactly one of Present, Exact, Prefix, Suffix, Contains, Regex is set.
// Several fields of the same name are joined with "," before matching, and
// "Host" (or ":authority") is the request's authority, as Envoy does.
type HeaderMatch struct {
	Name    string
	Present bool
	// Exact, Prefix, Suffix, Contains compare bytes (case-folded with
	// IgnoreCase); Regex is RE2 and must match the whole value.
	Exact, Prefix, Suffix, Contains, Regex string
	// Invert inverts the match. An absent header matches only an
	// inverted Present (Envoy HeaderMatcher semantics).
	Invert, IgnoreCase bool
}

// Problem is an intention that could not be compiled as given: it denies
// every request and connection of the sources it matches. The caller logs
// each once (Compile runs once per change of the intentions).
type Problem struct {
	// Intention is the intention's ID (or "<source> -> <destination>").
	Intention string
	Err       error
}

func (p Problem) Error() string { return "mesh: intention " + p.Intention + ": " + p.Err.Error() }

// Rules are compiled intentions: immutable, safe for concurrent use, built
// by [Compile] and swapped whole when the intentions change.
type Rules struct {
	ixns         []rule
	defaultAllow bool
	// byName lists, per exact source name, the indexes of its rules in
	// ixns (ascending); wild those of "*" sources. find looks at these
	// only, not at every rule.
	byName map[string][]int
	wild   []int
}

type rule struct {
	id   string
	peer string
	ap   string // "default" for ""
	ns   string // "default" for "", "*"
	name string // or "*"
	// l4 is the action of an L4 intention, or of an invalid one (false).
	l4    bool
	l7    bool
	perms []perm
	// bad: Compile reported a problem; the rule denies.
	bad bool
}

type perm struct {
	allow   bool
	path    pathMatch
	headers []headerMatch
	methods []string
}

type pathKind uint8

const (
	pathAny pathKind = iota
	pathExact
	pathPrefix
	pathRegex
)

type pathMatch struct {
	kind pathKind
	s    string
	re   *regexp.Regexp
}

type headerKind uint8

const (
	hdrPresent headerKind = iota
	hdrExact
	hdrPrefix
	hdrSuffix
	hdrContains
	hdrRegex
)

type headerMatch struct {
	name string // canonical MIME form, or ":authority"
	kind headerKind
	s    string
	re   *regexp.Regexp
	fold bool
	inv  bool
}

// Compile compiles ints with defaultAllow, the decision when no intention's
// source matches (Consul's ACL default policy: true for "allow", the
// X-Consul-Default-ACL-Policy header). It never fails: an intention it cannot
// compile (an unknown action, a regex Go's RE2 cannot compile, several path
// matchers, an unsupported requirement, ...) denies, and is reported in
// problems, one per intention.
//
// Order: ints are sorted by Precedence, highest first, stably (Consul's
// /v1/connect/intentions/match already answers in that order, so its
// answers are kept as they are); the first intention whose source matches
// a peer decides for it, the rest are never consulted for that peer —
// which is what Consul's "removeSameSourceIntentions" and its NOT-principals
// express for Envoy (agent/xds/rbac.go).
func Compile(ints []Intention, defaultAllow bool) (r *Rules, problems []Problem) {
	sorted := slices.Clone(ints)
	for i := range sorted {
		if sorted[i].Precedence <= 0 {
			sorted[i].Precedence = precedence(sorted[i])
		}
	}
	slices.SortStableFunc(sorted, func(a, b Intention) int { return cmp.Compare(b.Precedence, a.Precedence) })
	r = &Rules{defaultAllow: defaultAllow, ixns: make([]rule, 0, len(sorted))}
	for _, in := range sorted {
		ru, err := compileOne(in)
		if err != nil {
			problems = append(problems, Problem{Intention: ru.id, Err: err})
			ru.l4, ru.l7, ru.perms, ru.bad = false, false, nil, true
		}
		if ru.name == "*" {
			r.wild = append(r.wild, len(r.ixns))
		} else {
			if r.byName == nil {
				r.byName = map[string][]int{}
			}
			r.byName[ru.name] = append(r.byName[ru.name], len(r.ixns))
		}
		r.ixns = append(r.ixns, ru)
	}
	return r, problems
}

// precedence is Consul's Intention.UpdatePrecedence: 9, 6 or 3 for a
// destination with 2, 1 or 0 exact parts (namespace, name), minus 2 minus
// the source's exact parts.
func precedence(in Intention) int {
	exact := func(ns, name string) int {
		switch {
		case ns == "*":
			return 0
		case name == "*":
			return 1
		}
		return 2
	}
	return []int{3, 6, 9}[exact(in.DestinationNS, in.DestinationName)] - (2 - exact(in.SourceNS, in.SourceName))
}

func compileOne(in Intention) (rule, error) {
	ru := rule{id: in.ID, peer: in.SourcePeer, ap: orDefault(in.SourcePartition), ns: orDefault(in.SourceNS), name: in.SourceName}
	if ru.id == "" {
		ru.id = in.SourceName + " -> " + in.DestinationName
	}
	switch {
	case in.SourceName == "":
		return ru, errors.New("no source name")
	case in.SourcePartition == "*" || in.SourcePeer == "*":
		return ru, errors.New("a wildcard partition or peer")
	case in.SourceNS == "*" && in.SourceName != "*":
		return ru, errors.New("a wildcard namespace with an exact name")
	}
	if len(in.Permissions) == 0 {
		switch in.Action {
		case "allow":
			ru.l4 = true
		case "deny":
		default:
			return ru, fmt.Errorf("action %q: want allow or deny", in.Action)
		}
		return ru, nil
	}
	if in.Action != "" {
		return ru, fmt.Errorf("action %q beside permissions", in.Action)
	}
	ru.l7 = true
	for i, p := range in.Permissions {
		cp, err := compilePerm(p)
		if err != nil {
			return ru, fmt.Errorf("permission %d: %w", i+1, err)
		}
		ru.perms = append(ru.perms, cp)
	}
	return ru, nil
}

func compilePerm(p Permission) (perm, error) {
	var out perm
	switch p.Action {
	case "allow":
		out.allow = true
	case "deny":
	default:
		return out, fmt.Errorf("action %q: want allow or deny", p.Action)
	}
	if p.Unsupported != "" {
		return out, fmt.Errorf("%s requirements are not supported", p.Unsupported)
	}
	h := p.HTTP
	if h == nil {
		return out, nil
	}
	n := 0
	for _, s := range []string{h.PathExact, h.PathPrefix, h.PathRegex} {
		if s != "" {
			n++
		}
	}
	if n > 1 {
		return out, errors.New("more than one of path_exact, path_prefix, path_regex")
	}
	switch {
	case h.PathExact != "":
		out.path = pathMatch{kind: pathExact, s: h.PathExact}
	case h.PathPrefix != "":
		out.path = pathMatch{kind: pathPrefix, s: h.PathPrefix}
	case h.PathRegex != "":
		re, err := fullRegexp(h.PathRegex)
		if err != nil {
			return out, fmt.Errorf("path_regex: %w", err)
		}
		out.path = pathMatch{kind: pathRegex, re: re}
	}
	for _, hm := range h.Header {
		c, err := compileHeader(hm)
		if err != nil {
			return out, err
		}
		out.headers = append(out.headers, c)
	}
	for _, m := range h.Methods {
		if m == "" {
			return out, errors.New("an empty method")
		}
		out.methods = append(out.methods, m) // case-sensitive, as Envoy's :method regex
	}
	return out, nil
}

func compileHeader(h HeaderMatch) (headerMatch, error) {
	if h.Name == "" {
		return headerMatch{}, errors.New("a header without a name")
	}
	out := headerMatch{name: textproto.CanonicalMIMEHeaderKey(h.Name), fold: h.IgnoreCase, inv: h.Invert}
	if lc := strings.ToLower(h.Name); lc == ":authority" || lc == "host" {
		out.name = ":authority"
	}
	n := 0
	set := func(k headerKind, s string) {
		if s != "" {
			out.kind, out.s = k, s
			n++
		}
	}
	set(hdrExact, h.Exact)
	set(hdrPrefix, h.Prefix)
	set(hdrSuffix, h.Suffix)
	set(hdrContains, h.Contains)
	if h.Regex != "" {
		re, err := fullRegexp(h.Regex)
		if err != nil {
			return out, fmt.Errorf("header %s regex: %w", h.Name, err)
		}
		out.kind, out.re = hdrRegex, re
		n++
	}
	if h.Present {
		out.kind = hdrPresent
		n++
	}
	if n != 1 {
		return out, fmt.Errorf("header %s: want exactly one of present, exact, prefix, suffix, contains, regex (have %d)", h.Name, n)
	}
	return out, nil
}

// fullRegexp compiles an RE2 expression anchored at both ends, as Envoy's
// safe_regex matches a whole value. expr is compiled alone first: only a
// valid expression has balanced groups, so "a)|(.*" cannot escape the
// anchors.
func fullRegexp(expr string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(expr); err != nil {
		return nil, err
	}
	return regexp.Compile(`^(?:` + expr + `)$`)
}
