package pathnorm

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

var (
	optReject   = PathOptions{}
	optKeep     = PathOptions{EscapedSlashes: EscapedSlashesKeep}
	optUnescape = PathOptions{EscapedSlashes: EscapedSlashesUnescape}
	optMerge    = PathOptions{MergeSlashes: true}
)

// TestNormalizePath is the normaliser's table: "" wants an ErrInvalidPath.
func TestNormalizePath(t *testing.T) {
	for _, c := range []struct {
		in   string
		o    PathOptions
		want string
	}{
		// Nothing to do.
		{"/", optReject, "/"},
		{"/a/b/c", optReject, "/a/b/c"},
		{"/style.css", optReject, "/style.css"},
		{"/a/.b/..c/...", optReject, "/a/.b/..c/..."},
		{"/a;b=c/d", optReject, "/a;b=c/d"},
		{"/a/b/", optReject, "/a/b/"},
		{"/!$&'()*+,;=:@~-._", optReject, "/!$&'()*+,;=:@~-._"},
		// RFC 3986 §5.4 examples, resolved against base "/b/c/d;p", as paths.
		{"/b/c/./g", optReject, "/b/c/g"},
		{"/b/c/g/.", optReject, "/b/c/g/"},
		{"/b/c/.", optReject, "/b/c/"},
		{"/b/c/./", optReject, "/b/c/"},
		{"/b/c/..", optReject, "/b/"},
		{"/b/c/../", optReject, "/b/"},
		{"/b/c/../g", optReject, "/b/g"},
		{"/b/c/../..", optReject, "/"},
		{"/b/c/../../", optReject, "/"},
		{"/b/c/../../g", optReject, "/g"},
		{"/b/c/../../../g", optReject, ""}, // §5.4.2 resolves to "/g"; we refuse the climb
		{"/b/c/./../g", optReject, "/b/g"},
		{"/b/c/./g/.", optReject, "/b/c/g/"},
		{"/b/c/g/./h", optReject, "/b/c/g/h"},
		{"/b/c/g/../h", optReject, "/b/c/h"},
		{"/b/c/g;x=1/./y", optReject, "/b/c/g;x=1/y"},
		{"/b/c/g;x=1/../y", optReject, "/b/c/y"},
		{"/a/b/c/./../../g", optReject, "/a/g"}, // §5.2.4's own example
		// The attack this exists for.
		{"/api/../admin", optReject, "/admin"},
		{"/api/./../admin", optReject, "/admin"},
		{"/api/%2e%2e/admin", optReject, "/admin"},
		{"/api/%2e%2E/admin", optReject, "/admin"},
		{"/api/.%2E/admin", optReject, "/admin"},
		{"/api/%2E/admin", optReject, "/api/admin"},
		{"/api/..", optReject, "/"},
		{"/..", optReject, ""},
		{"/../etc/passwd", optReject, ""},
		{"/a/./../..", optReject, ""},
		// Double encoding is data: "%25" is "%", never decoded twice.
		{"/api/%252e%252e/admin", optReject, "/api/%252e%252e/admin"},
		{"/api/%252E", optReject, "/api/%252E"},
		// Unreserved escapes are decoded, others get upper-case hex.
		{"/%7Euser/%61%62%63", optReject, "/~user/abc"},
		{"/a%2db%5fc%2E", optReject, "/a-b_c."},
		{"/a%3fb%3Bc%25", optReject, "/a%3Fb%3Bc%25"},
		{"/caf%c3%a9", optReject, "/caf%C3%A9"},
		{"/caf\xc3\xa9", optReject, "/caf%C3%A9"},
		{"/r[1]|{x}^`\"<>", optReject, "/r%5B1%5D%7C%7Bx%7D%5E%60%22%3C%3E"},
		// Malformed escapes and control bytes.
		{"/a%", optReject, ""},
		{"/a%2", optReject, ""},
		{"/a%zz", optReject, ""},
		{"/a%g0", optReject, ""},
		{"/a%00b", optReject, ""},
		{"/a%0d%0a", optReject, ""},
		{"/a%1F", optReject, ""},
		{"/a%7f", optReject, ""},
		{"/a\x00", optReject, ""},
		{"/a b", optReject, ""},
		{"/a#f", optReject, ""},
		{"", optReject, ""},
		{"*", optReject, ""},
		{"a/b", optReject, ""},
		{"http://x/a", optReject, ""},
		// ";" parameters: a dot-segment with a parameter climbs on Tomcat.
		{"/api/..;/admin", optReject, ""},
		{"/api/.;x/admin", optReject, ""},
		{"/api/%2e%2e;/admin", optReject, ""},
		{"/api/..x;/admin", optReject, "/api/..x;/admin"},
		{"/api/x;../admin", optReject, "/api/x;../admin"},
		// "//": kept by default, merged on request.
		{"//a//b/", optReject, "//a//b/"},
		{"/a//../b", optReject, "/a/b"},
		{"//a//b/", optMerge, "/a/b/"},
		{"/a//../b", optMerge, "/b"},
		{"/a///", optMerge, "/a/"},
		{"//", optMerge, "/"},
		{"/.//..", optMerge, ""},
		// Encoded slashes and backslashes.
		{"/api%2F..%2Fadmin", optReject, ""},
		{"/api/..%2fadmin", optReject, ""},
		{"/api/..%5Cadmin", optReject, ""},
		{"/api\\..\\admin", optReject, ""},
		{"/api%2F..%2Fadmin", optKeep, "/api%2F..%2Fadmin"},
		{"/api/..%2fadmin", optKeep, "/api/..%2Fadmin"},
		{"/api\\..\\admin", optKeep, "/api%5C..%5Cadmin"},
		{"/p/group%2fproject", optKeep, "/p/group%2Fproject"},
		{"/api%2F..%2Fadmin", optUnescape, "/admin"},
		{"/api/..%5cadmin", optUnescape, "/admin"},
		{"/api\\..\\admin", optUnescape, "/admin"},
		{"/a%2F%2Fb", optUnescape, "/a//b"},
		{"/a%2F%2Fb", PathOptions{EscapedSlashes: EscapedSlashesUnescape, MergeSlashes: true}, "/a/b"},
		{"/%2F..%2F..", optUnescape, ""},
	} {
		got, err := NormalizePath(c.in, c.o)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("NormalizePath(%q, %+v) = %q, want an error", c.in, c.o, got)
		case c.want == "" && !errors.Is(err, ErrInvalidPath):
			t.Errorf("NormalizePath(%q, %+v): %v does not wrap ErrInvalidPath", c.in, c.o, err)
		case c.want != "" && (err != nil || got != c.want):
			t.Errorf("NormalizePath(%q, %+v) = %q, %v; want %q", c.in, c.o, got, err, c.want)
		}
	}
}

// TestNormalizePathIdempotent: for random paths over the characters that
// matter, the normal form is its own normal form, holds no dot-segment, no
// lower-case or unreserved escape, and (merging) no "//".
func TestNormalizePathIdempotent(t *testing.T) {
	parts := []string{"/", "/", ".", "..", "%2e", "%2E", "%2F", "%2f", "%5c", "\\", "%25", "%41", "%7e", "%c3%a9", "é", ";", "a", "b", "~", "//", "|", "%3b"}
	rng := rand.New(rand.NewPCG(1, 2))
	opts := []PathOptions{optReject, optKeep, optUnescape, optMerge,
		{EscapedSlashes: EscapedSlashesKeep, MergeSlashes: true}, {EscapedSlashes: EscapedSlashesUnescape, MergeSlashes: true}}
	valid := 0
	for n := 0; n < 20000; n++ {
		var b strings.Builder
		b.WriteByte('/')
		for k := rng.IntN(10); k >= 0; k-- {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		in := b.String()
		for _, o := range opts {
			once, err := NormalizePath(in, o)
			if err != nil {
				continue
			}
			valid++
			twice, err := NormalizePath(once, o)
			if err != nil || twice != once {
				t.Fatalf("%+v: %q -> %q -> %q, %v", o, in, once, twice, err)
			}
			for _, seg := range strings.Split(once, "/") {
				if dotSegment(seg) {
					t.Fatalf("%+v: %q -> %q holds a dot-segment", o, in, once)
				}
			}
			for i := strings.IndexByte(once, '%'); i >= 0; i = strings.IndexByte(once[i+1:], '%') + i + 1 {
				v := byte(unhex(once[i+1])<<4 | unhex(once[i+2]))
				if unreserved(v) || strings.ToUpper(once[i:i+3]) != once[i:i+3] {
					t.Fatalf("%+v: %q -> %q: escape %q is not normal", o, in, once, once[i:i+3])
				}
				if strings.IndexByte(once[i+1:], '%') < 0 {
					break
				}
			}
			if o.MergeSlashes && strings.Contains(once, "//") {
				t.Fatalf("%+v: %q -> %q keeps \"//\"", o, in, once)
			}
		}
	}
	if valid < 10000 {
		t.Fatalf("only %d valid inputs; the generator is too hostile", valid)
	}
}

func TestNormalizePathCleanDoesNotAllocate(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _, _ = NormalizePath("/api/v1/users/42;v=1/style.css", optReject) }); n != 0 {
		t.Fatalf("%v allocations for a clean path", n)
	}
}

// TestCheckPrefix: a route prefix is accepted only in a form whose
// normalisation keeps its segments (what validate and the route table
// both check).
func TestCheckPrefix(t *testing.T) {
	for _, p := range []string{"/", "/api", "/static/", "/%7eu/caf%C3%A9", "/a%2Fb"} {
		if err := CheckPrefix(p); err != nil {
			t.Errorf("CheckPrefix(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"api", "/a/%2E%2E", "/a/./b", "/a%00", "/a%2", "/x/..;/y", "/x/.;/y", "/a/%2e%2e;/b", "/.."} {
		if err := CheckPrefix(p); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("CheckPrefix(%q) = %v, want ErrInvalidPath", p, err)
		}
	}
}

func TestLaxReading(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/api/x", "/api/x"},
		{"//api/x", "/api/x"},
		{"/api//x///y", "/api/x/y"},
		{"/api;jsessionid=1/x", "/api/x"},
		{"/api/x;v=1", "/api/x"},
		{"/a;b;c/d;e", "/a/d"},
		{"/;x", "/"},
		{"/", "/"},
	} {
		got, changed := LaxReading(c.in)
		if got != c.want || changed != (c.in != c.want) {
			t.Errorf("LaxReading(%q) = %q, %v; want %q", c.in, got, changed, c.want)
		}
	}
}
