package pathnorm

import (
	"errors"
	"strings"
	"testing"
)

// FuzzNormalizePath checks the normaliser against isNormal, a reference
// statement of the normal form written from the documentation: for every
// path and options, NormalizePath either fails with ErrInvalidPath or
// returns a normal path, which it then returns unchanged (idempotence); a
// path already normal is returned as is. CheckPrefix accepts a prefix only
// when it normalises with its segments intact.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{
		"/", "/a/b/c", "/a/./b/../c", "/a/%2e%2E/b", "/api/..%2Fadmin", "/a%5Cb", "/a\\b", "/a//b///c",
		"/%7Eu/x", "/..;/x", "/a/..;x/b", "/%41%62%63", "/a%zz", "/a b", "/caf\u00e9", "/[x]|{y}", "/a/b/..",
		"/./", "/%00", "/a/%252E%252E/b", "//x", "/a%2f..%2fb", "/%2E%2E%2F", "/a%2", "/%", "a", "",
	} {
		for b := byte(0); b < 6; b++ {
			f.Add(s, b)
		}
	}
	f.Fuzz(func(t *testing.T, p string, opts byte) {
		o := PathOptions{MergeSlashes: opts&1 != 0, EscapedSlashes: EscapedSlashes((opts >> 1) % 3)}
		norm, err := NormalizePath(p, o)
		if err != nil {
			if !errors.Is(err, ErrInvalidPath) {
				t.Fatalf("%q: error %v does not wrap ErrInvalidPath", p, err)
			}
			if isNormal(p, o) {
				t.Fatalf("%q is normal but refused: %v", p, err)
			}
		} else {
			if !isNormal(norm, o) {
				t.Fatalf("%q normalises to %q, which is not normal", p, norm)
			}
			if again, err := NormalizePath(norm, o); err != nil || again != norm {
				t.Fatalf("%q: not idempotent: %q then %q (%v)", p, norm, again, err)
			}
			if isNormal(p, o) && norm != p {
				t.Fatalf("%q is normal but became %q", p, norm)
			}
		}
		if CheckPrefix(p) == nil {
			k, err := NormalizePath(p, PathOptions{EscapedSlashes: EscapedSlashesKeep})
			if err != nil || strings.Count(k, "/") != strings.Count(p, "/") {
				t.Fatalf("CheckPrefix accepts %q, which normalises to %q (%v)", p, k, err)
			}
		}
	})
}

// isNormal reports whether p is in normal form under o: it starts with
// "/"; every raw byte is visible ASCII that a path may hold raw (not
// `%\#?"<>^{|}[]` or the backquote); every "%" starts two upper-case hex
// digits encoding a byte that is not unreserved, not a control byte, and
// is "/" or "\" only when escaped slashes are kept; no segment is "." or
// "..", alone or before a ";"; and with o.MergeSlashes no "//".
func isNormal(p string, o PathOptions) bool {
	if !strings.HasPrefix(p, "/") || o.MergeSlashes && strings.Contains(p, "//") {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' {
			if i+2 >= len(p) || !upperHex(p[i+1]) || !upperHex(p[i+2]) {
				return false
			}
			v := byte(unhex(p[i+1])<<4 | unhex(p[i+2]))
			if unreserved(v) || v < 0x20 || v == 0x7f || (v == '/' || v == '\\') && o.EscapedSlashes != EscapedSlashesKeep {
				return false
			}
			i += 2
			continue
		}
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\\#?\"<>^`{|}[]", c) >= 0 {
			return false
		}
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if s, _, _ := strings.Cut(seg, ";"); s == "." || s == ".." {
			return false
		}
	}
	return true
}

func upperHex(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }
