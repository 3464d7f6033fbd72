package hcl

// Path normalisation settings: top-level arguments named as Envoy's
// HttpConnectionManager names them (normalize_path, merge_slashes,
// path_with_escaped_slashes_action). Routing always uses the normalised path;
// these choose what is forwarded and how "//", "%2F" and "%5C" are read.

const (
	// DefaultNormalizePath is normalize_path when absent: forward the
	// normalised path.
	DefaultNormalizePath = true
	// DefaultMergeSlashes is merge_slashes when absent: "//" is kept.
	DefaultMergeSlashes = false
	// DefaultEscapedSlashes is escaped_slashes when absent: a request whose
	// path holds "%2F", "%5C" or "\" is refused (400 invalid_path).
	DefaultEscapedSlashes = "reject"
)

// escapedSlashes are the accepted escaped_slashes values.
var escapedSlashes = []string{"reject", "keep", "unescape"}

// Paths are the top-level path normalisation settings (README "Routing").
type Paths struct {
	// NormalizePath forwards the normalised path (default true); false
	// forwards the path as sent. Routing uses the normalised path either way.
	NormalizePath bool
	// MergeSlashes collapses "//" into "/" for routing and forwarding
	// (default false).
	MergeSlashes bool
	// EscapedSlashes is "reject" (default), "keep" or "unescape".
	EscapedSlashes string
}

// DefaultPaths returns the settings of a file without path arguments.
func DefaultPaths() Paths {
	return Paths{NormalizePath: DefaultNormalizePath, MergeSlashes: DefaultMergeSlashes, EscapedSlashes: DefaultEscapedSlashes}
}

// buildPaths reads the top-level path arguments of m.
func buildPaths(top blk, m *rawFile) Paths {
	return Paths{
		NormalizePath:  top.boolean(m.NormalizePath, DefaultNormalizePath),
		MergeSlashes:   top.boolean(m.MergeSlashes, DefaultMergeSlashes),
		EscapedSlashes: top.oneOf(m.EscapedSlashes, DefaultEscapedSlashes, escapedSlashes...),
	}
}
