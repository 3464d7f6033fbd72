// Package pathnorm is the request-path normaliser (RFC 3986 §5.2.4, §6.2.2)
// shared by the route table, which matches and forwards normalised paths,
// and the configuration checks, which must refuse every route prefix the
// table would refuse.
package pathnorm

import (
	"errors"
	"strings"
)

// EscapedSlashes is what the path normaliser does with an encoded slash
// ("%2F") or backslash ("%5C", and a literal "\"), which some backends
// decode into a separator: matched as one segment, "/api/..%2Fadmin" would
// route by "/api" and reach such a backend's "/admin". Envoy's
// path_with_escaped_slashes_action is the model.
type EscapedSlashes uint8

const (
	// EscapedSlashesReject (the zero value and default) answers 400.
	EscapedSlashesReject EscapedSlashes = iota
	// EscapedSlashesKeep keeps them as data inside one segment: "%2F" and
	// "%5C" (upper-case hex; a literal "\" becomes "%5C", as no path may
	// hold it raw). Safe only for backends that never decode them into
	// separators.
	EscapedSlashesKeep
	// EscapedSlashesUnescape turns each into "/" before dot-segments are
	// removed, so the route is chosen by the path a decoding backend sees.
	EscapedSlashesUnescape
)

// ParseEscapedSlashes maps the configuration words "reject", "keep" and
// "unescape" to their value; ok is false for any other word.
func ParseEscapedSlashes(s string) (v EscapedSlashes, ok bool) {
	switch s {
	case "reject":
		return EscapedSlashesReject, true
	case "keep":
		return EscapedSlashesKeep, true
	case "unescape":
		return EscapedSlashesUnescape, true
	}
	return 0, false
}

// PathOptions are the path normalisation settings. The zero value is the
// default: forward the normalised path, keep "//", reject encoded slashes.
type PathOptions struct {
	// ForwardAsSent forwards the path the client sent instead of the
	// normalised one (normalize_path = false). Routing always uses the
	// normalised path.
	ForwardAsSent bool
	// MergeSlashes collapses runs of "/" into one before dot-segments are
	// removed (as nginx does), for matching and forwarding.
	MergeSlashes bool
	// EscapedSlashes is the treatment of "%2F", "%5C" and "\".
	EscapedSlashes EscapedSlashes
}

// ErrInvalidPath is wrapped by every NormalizePath error: the path cannot
// be routed safely and is answered 400 invalid_path.
var ErrInvalidPath = errors.New("invalid path")

type pathError string

func (e pathError) Error() string        { return "invalid path: " + string(e) }
func (e pathError) Is(target error) bool { return target == ErrInvalidPath }

// NormalizePath returns the normal form of p, the path part of a request
// target (no query), in its escaped form. In order:
//
//   - a percent-escape must be "%" and two hex digits; an escaped unreserved
//     character (ALPHA, DIGIT, "-", ".", "_", "~") is decoded (RFC 3986
//     §2.3, §6.2.2.2), the hex of every other escape is upper-cased
//     (§6.2.2.1); an escaped control byte (%00-%1F, %7F) is an error;
//   - "%2F", "%5C" and "\" follow o.EscapedSlashes (kept: "%2F", "%5C");
//   - a byte a path may not hold raw (RFC 3986 §3.3: non-ASCII, `"<>^{|}[]`
//     and the backquote) is percent-encoded; a raw control byte, space, "#"
//     or "?" is an error;
//   - with o.MergeSlashes, "//" becomes "/";
//   - dot-segments are removed (RFC 3986 §5.2.4, including "%2E"
//     spellings); a ".." above the root is an error, and so is a segment
//     that is "." or ".." before a ";" ("..;x"): servlet containers strip
//     such parameters and would climb.
//
// The result starts with "/" and NormalizePath(result) returns it unchanged.
// Errors wrap ErrInvalidPath. A path with nothing to change is returned
// without allocating.
func NormalizePath(p string, o PathOptions) (string, error) {
	if p == "" || p[0] != '/' {
		return "", pathError("does not start with \"/\"")
	}
	if clean(p, o) {
		return p, nil
	}
	var b strings.Builder
	b.Grow(len(p) + 8)
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%':
			if i+2 >= len(p) || unhex(p[i+1]) < 0 || unhex(p[i+2]) < 0 {
				return "", pathError("a \"%\" not followed by two hex digits")
			}
			v := byte(unhex(p[i+1])<<4 | unhex(p[i+2]))
			i += 2
			switch {
			case unreserved(v):
				b.WriteByte(v)
			case v < 0x20 || v == 0x7f:
				return "", pathError("an encoded control byte")
			case v == '/' || v == '\\':
				if err := slash(&b, v, o.EscapedSlashes); err != nil {
					return "", err
				}
			default:
				writeEscape(&b, v)
			}
		case c == '\\':
			if err := slash(&b, c, o.EscapedSlashes); err != nil {
				return "", err
			}
		case c <= ' ' || c == 0x7f || c == '#' || c == '?':
			return "", pathError("a control byte, space, \"#\" or \"?\"")
		case c >= 0x80 || strings.IndexByte("\"<>^`{|}[]", c) >= 0:
			writeEscape(&b, c)
		default:
			b.WriteByte(c)
		}
	}
	return removeDots(b.String(), o.MergeSlashes)
}

// clean reports whether p needs no change: no escape, backslash, byte to
// encode, dot-segment or (when merging) "//".
func clean(p string, o PathOptions) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' || c == '\\' || c <= ' ' || c >= 0x7f || strings.IndexByte("\"<>^`{|}[]#?", c) >= 0 {
			return false
		}
		if c == '/' && i+1 < len(p) {
			if o.MergeSlashes && p[i+1] == '/' {
				return false
			}
			if p[i+1] == '.' && dotSegment(segmentAt(p, i+1)) {
				return false
			}
		}
	}
	return true
}

// segmentAt returns the segment of p starting at i (up to the next "/").
func segmentAt(p string, i int) string {
	if j := strings.IndexByte(p[i:], '/'); j >= 0 {
		return p[i : i+j]
	}
	return p[i:]
}

// dotSegment reports whether seg is "." or "..", alone or before a ";".
func dotSegment(seg string) bool {
	if i := strings.IndexByte(seg, ';'); i >= 0 {
		seg = seg[:i]
	}
	return seg == "." || seg == ".."
}

// removeDots merges slashes (if asked) and removes dot-segments from p,
// whose escapes are already normalised.
func removeDots(p string, merge bool) (string, error) {
	segs := strings.Split(p[1:], "/")
	out := segs[:0]
	for i, s := range segs {
		last := i == len(segs)-1
		switch {
		case s == "" && merge && !last:
			continue
		case s == "." || s == "..":
			if s == ".." {
				if len(out) == 0 {
					return "", pathError("a \"..\" segment above the root")
				}
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "") // "/a/b/.." is "/a/", RFC 3986 §5.2.4
			}
		case dotSegment(s):
			return "", pathError("a dot-segment with a \";\" parameter")
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/"), nil
}

func slash(b *strings.Builder, c byte, mode EscapedSlashes) error {
	switch mode {
	case EscapedSlashesUnescape:
		b.WriteByte('/')
	case EscapedSlashesKeep:
		writeEscape(b, c)
	default:
		return pathError("an encoded slash or a backslash (escaped_slashes = \"reject\")")
	}
	return nil
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func writeEscape(b *strings.Builder, c byte) {
	const hex = "0123456789ABCDEF"
	b.WriteByte('%')
	b.WriteByte(hex[c>>4])
	b.WriteByte(hex[c&15])
}

// CheckPrefix reports whether p can be a route's path_prefix: it starts with
// "/" and normalises (escaped slashes kept) without losing a segment, since
// "/a/%2E%2E" would silently become "/". Errors wrap ErrInvalidPath.
func CheckPrefix(p string) error {
	if !strings.HasPrefix(p, "/") {
		return pathError(`must start with "/"`)
	}
	norm, err := NormalizePath(p, PathOptions{EscapedSlashes: EscapedSlashesKeep})
	if err != nil {
		return err
	}
	if strings.Count(norm, "/") != strings.Count(p, "/") {
		return pathError("dot-segments")
	}
	return nil
}

// LaxReading returns the normal form p as a lenient backend reads it, and
// whether that differs from p: runs of "/" merged into one (nginx's
// merge_slashes, on by default) and ";" parameters dropped from every
// segment (servlet containers such as Tomcat and Jetty serve "/a;x=1/b" as
// "/a/b"). The gateway refuses a path whose lax reading is routed unlike the
// path itself: a route's policies (authentication, IP rules, rate limits)
// would not apply to what such a backend serves. "/" alone stays "/".
func LaxReading(p string) (string, bool) {
	if !strings.Contains(p, "//") && strings.IndexByte(p, ';') < 0 {
		return p, false
	}
	var b strings.Builder
	b.Grow(len(p))
	inParam := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '/':
			inParam = false
			if b.Len() > 0 && b.String()[b.Len()-1] == '/' {
				continue
			}
			b.WriteByte(c)
		case c == ';':
			inParam = true
		case !inParam:
			b.WriteByte(c)
		}
	}
	out := b.String()
	return out, out != p
}
