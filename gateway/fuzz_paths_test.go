package gateway

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/route"
	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

// fuzzPathOptions maps the fuzzer's byte to the path settings: every
// combination of forward-as-sent, merge slashes and the three
// escaped-slash modes.
func fuzzPathOptions(b byte) pathnorm.PathOptions {
	return pathnorm.PathOptions{
		ForwardAsSent:  b&1 != 0,
		MergeSlashes:   b&2 != 0,
		EscapedSlashes: pathnorm.EscapedSlashes((b >> 2) % 3),
	}
}

// FuzzNormalizeTarget drives a request-target through what every ingress
// does with it (url.ParseRequestURI, as net/http, x/net/http2 and quic-go
// do; validRequestTarget) and then normalizeTarget, as serve does. For any
// target the gateway accepts:
//   - the normal form starts with "/" and is a fixed point (normalising it
//     again changes nothing);
//   - the backend gets exactly the normal form (or, forwarding as sent, the
//     path sent: the same segments and bytes once decoded), and the query
//     as sent;
//   - normalising what the backend gets routes to the same route: a second
//     gateway, or a backend applying the same rules, agrees on the route;
//   - unless the path is forwarded as sent or escaped slashes are kept
//     (documented as safe only for backends that never decode them), decoding the forwarded path once yields no
//     dot-segment and no backslash: a decoding backend cannot climb out of
//     the route's prefix.
func FuzzNormalizeTarget(f *testing.F) {
	for _, s := range []string{
		"/", "/a/b/c", "/a/./b/../c", "/a/%2e%2E/b", "/api/..%2Fadmin", "/a%5Cb", "/a\\b",
		"/a//b///c", "/%7Eu/x?q=1&r=%2F", "/..;/x", "/a/..;x/b", "/%41%62%63", "/a%zz", "/a b",
		"/a#f", "/caf\u00e9", "/[x]|{y}", "*", "/a?", "/a/b/..", "/./", "/%00", "/a/%252E%252E/b",
		"//x", "/a%2f..%2fb", "/a/%2E%2E%2F",
	} {
		for b := byte(0); b < 12; b++ {
			f.Add(s, b)
		}
	}
	f.Fuzz(func(t *testing.T, target string, opts byte) {
		o := fuzzPathOptions(opts)
		u, err := url.ParseRequestURI(target)
		if err != nil || !validRequestTarget(target) {
			return // 400 before the pipeline (the server) or in serve
		}
		query := u.RawQuery
		r := &http.Request{Method: http.MethodGet, RequestURI: target, URL: u, Host: "h.example"}
		norm, err := normalizeTarget(r, &o)
		if err != nil {
			if !errors.Is(err, pathnorm.ErrInvalidPath) {
				t.Fatalf("%q: error %v does not wrap ErrInvalidPath", target, err)
			}
			return
		}
		if target == "*" {
			return
		}
		if !strings.HasPrefix(norm, "/") {
			t.Fatalf("%q: normal form %q does not start with /", target, norm)
		}
		again, err := pathnorm.NormalizePath(norm, o)
		if err != nil || again != norm {
			t.Fatalf("%q: not idempotent: %q then %q (%v)", target, norm, again, err)
		}
		if r.URL.RawQuery != query {
			t.Fatalf("%q: query %q became %q", target, query, r.URL.RawQuery)
		}
		// What outgoing puts on the wire (url.URL.RequestURI of the
		// backend request).
		wire := (&url.URL{Path: r.URL.Path, RawPath: r.URL.RawPath}).EscapedPath()
		if !o.ForwardAsSent && wire != norm {
			t.Fatalf("%q: routed as %q but the backend gets %q", target, norm, wire)
		}
		if o.ForwardAsSent {
			// As sent: the same bytes once decoded, the same segments.
			rawPath, _, _ := strings.Cut(target, "?")
			dw, err1 := url.PathUnescape(wire)
			dr, err2 := url.PathUnescape(rawPath)
			if err1 != nil || err2 != nil || dw != dr || strings.Count(wire, "/") != strings.Count(rawPath, "/") {
				t.Fatalf("%q: forwarded as sent, the backend gets %q", target, wire)
			}
		}
		rewire, err := pathnorm.NormalizePath(wire, o)
		if err != nil || rewire != norm {
			t.Fatalf("%q: routed as %q, the backend gets %q which normalises to %q (%v)", target, norm, wire, rewire, err)
		}
		tbl := prefixTable(t, norm)
		if a, b := tbl.Match("h.example", norm, "GET"), tbl.Match("h.example", rewire, "GET"); a != b {
			t.Fatalf("%q: route %v for %q, %v for the forwarded %q", target, a, norm, b, rewire)
		}
		if o.ForwardAsSent || o.EscapedSlashes == pathnorm.EscapedSlashesKeep {
			return // the backend gets what the client sent, or "%2F" as data
		}
		dec, err := url.PathUnescape(wire)
		if err != nil {
			t.Fatalf("%q: the backend gets %q, which does not decode: %v", target, wire, err)
		}
		if strings.Contains(dec, "\\") {
			t.Fatalf("%q: the backend gets %q, a backslash once decoded (%q)", target, wire, dec)
		}
		for _, seg := range strings.Split(dec, "/") {
			if s, _, _ := strings.Cut(seg, ";"); s == "." || s == ".." {
				t.Fatalf("%q: the backend gets %q, a dot-segment once decoded (%q)", target, wire, dec)
			}
		}
	})
}

// prefixTable is a route table with one route per segment prefix of p
// (both "/a" and "/a/" forms) and the catch-all "/", each to its own
// upstream.
func prefixTable(t *testing.T, p string) *route.Table[string] {
	defs := []route.Definition{{Upstream: "root", PathPrefix: "/"}}
	targets := map[string]string{"root": "root"}
	seen := map[string]bool{"/": true}
	for i := 1; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		for _, pre := range []string{p[:i], p[:i+1]} {
			if seen[pre] || pathnorm.CheckPrefix(pre) != nil {
				continue
			}
			seen[pre] = true
			defs = append(defs, route.Definition{Upstream: pre, PathPrefix: pre})
			targets[pre] = pre
		}
	}
	tbl, err := route.Build(defs, targets)
	if err != nil {
		t.Fatalf("prefixes of %q: %v", p, err)
	}
	return tbl
}
