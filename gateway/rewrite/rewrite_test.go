package rewrite

import (
	"strings"
	"testing"

	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

func TestRuleApply(t *testing.T) {
	for _, c := range []struct {
		cfg          Config
		prefix, path string
		want         string
	}{
		{Config{StripPrefix: true}, "/api/", "/api/users", "/users"},
		{Config{StripPrefix: true}, "/api/", "/api/", "/"},
		{Config{StripPrefix: true}, "/api", "/api", "/"},
		{Config{StripPrefix: true}, "/api", "/api/a%2Fb", "/a%2Fb"},
		{Config{StripPrefix: true}, "/", "/x/y", "/x/y"},
		{Config{PrefixRewrite: "/internal/v1/"}, "/v1/", "/v1/a", "/internal/v1/a"},
		{Config{PrefixRewrite: "/internal/v1/"}, "/v1/", "/v1/", "/internal/v1/"},
		{Config{PrefixRewrite: "/internal"}, "/v1", "/v1", "/internal"},
		{Config{PrefixRewrite: "/"}, "/v1/", "/v1//a", "//a"},
	} {
		r, err := New(c.cfg, c.prefix)
		if err != nil {
			t.Fatalf("%+v: %v", c.cfg, err)
		}
		if got, ok := r.Apply(c.path); !ok || got != c.want {
			t.Errorf("%+v on %q: %q %v, want %q", c.cfg, c.path, got, ok, c.want)
		}
	}
	if r, err := New(Config{}, "/"); r != nil || err != nil {
		t.Errorf("zero config: %v %v", r, err)
	}
	for _, bad := range []Config{{StripPrefix: true, PrefixRewrite: "/a"}, {PrefixRewrite: "a"}, {PrefixRewrite: "/a/../b"}, {PrefixRewrite: "/a%2Fb"}, {PrefixRewrite: "/%7e"}} {
		if _, err := New(bad, "/"); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestRedirectLocation(t *testing.T) {
	for _, c := range []struct {
		cfg                 RedirectConfig
		prefix, path, query string
		want                string
	}{
		{RedirectConfig{To: "https://new.example.com", Code: 301}, "/", "/a", "b", "https://new.example.com/a?b"},
		{RedirectConfig{To: "https://new.example.com/", Code: 308}, "/", "/", "", "https://new.example.com/"},
		{RedirectConfig{To: "https://new.example.com:8443/new/", Code: 302, StripQuery: true}, "/old/", "/old/x", "q=1", "https://new.example.com:8443/new/x"},
		{RedirectConfig{To: "http://h", Code: 307}, "/old", "/old", "", "http://h/"},
	} {
		d, err := NewRedirect(c.cfg, c.prefix)
		if err != nil {
			t.Fatalf("%+v: %v", c.cfg, err)
		}
		if got := d.Location(c.path, c.query); got != c.want || d.Code() != c.cfg.Code {
			t.Errorf("%+v on %q?%q: %q, want %q", c.cfg, c.path, c.query, got, c.want)
		}
	}
	for _, bad := range []RedirectConfig{{To: "new.example.com", Code: 301}, {To: "//new.example.com", Code: 301},
		{To: "ftp://h", Code: 301}, {To: "https://h", Code: 303}, {To: "https://h/a/../b", Code: 301},
		{To: "https://u@h", Code: 301}, {To: "https://h/#f", Code: 301}, {To: "https://h/?q", Code: 301}} {
		if _, err := NewRedirect(bad, "/"); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// FuzzRewrite: a normalised request path under a route's prefix (any
// valid path_prefix), rewritten by strip_prefix or any valid
// prefix_rewrite, is a path the route table would take: in normal form
// (with and without escaped slashes kept, as the request's was), starting
// with "/", and what followed the prefix is kept byte for byte.
func FuzzRewrite(f *testing.F) {
	for _, s := range [][3]string{{"/api/", "/api/users", ""}, {"/api", "/api", ""}, {"/v1/", "/v1/a", "/internal/v1/"},
		{"/v1", "/v1//a%2Fb", "/x"}, {"/", "/a;b/c", "/p/"}, {"/a%2F", "/a%2F/b", "/"}} {
		f.Add(s[0], s[1], s[2], s[2] == "")
	}
	f.Fuzz(func(t *testing.T, prefix, path, with string, strip bool) {
		if pathnorm.CheckPrefix(prefix) != nil {
			return
		}
		for _, o := range []pathnorm.PathOptions{{}, {EscapedSlashes: pathnorm.EscapedSlashesKeep}, {MergeSlashes: true}} {
			norm, err := pathnorm.NormalizePath(path, o)
			if err != nil {
				continue
			}
			np, _ := pathnorm.NormalizePath(prefix, pathnorm.PathOptions{EscapedSlashes: pathnorm.EscapedSlashesKeep})
			if !underPrefix(np, norm) {
				continue
			}
			cfg := Config{StripPrefix: strip}
			if !strip {
				cfg.PrefixRewrite = with
			}
			r, err := New(cfg, np)
			if err != nil || r == nil {
				continue
			}
			out, ok := r.Apply(norm)
			if !ok {
				t.Fatalf("prefix %q, path %q (%+v), %+v: refused", np, norm, o, cfg)
			}
			again, err := pathnorm.NormalizePath(out, o)
			if err != nil || again != out || !strings.HasPrefix(out, "/") {
				t.Fatalf("prefix %q, path %q (%+v), %+v: %q is not in normal form (%q, %v)", np, norm, o, cfg, out, again, err)
			}
			rest := norm[len(strings.TrimSuffix(np, "/")):]
			if rest != "" && !strings.HasSuffix(out, rest) {
				t.Fatalf("prefix %q, path %q, %+v: %q lost %q", np, norm, cfg, out, rest)
			}
		}
	})
}

// underPrefix is the route table's segment-wise prefix match.
func underPrefix(prefix, path string) bool {
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	return len(path) == len(prefix) || prefix[len(prefix)-1] == '/' || path[len(prefix)] == '/'
}
