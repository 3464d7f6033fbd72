package hcl

import (
	"fmt"
	"math"
	"math/big"
	"os"
	"regexp"
	"strings"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// blk is the builder's view of one block while it is converted: its field
// path for messages (e.g. `upstream "web" backend "b1"`), its definition range
// and the shared diagnostics sink. Its helpers convert *hcl2.Attribute values
// to Go types and report problems with Subject = the value's range and a
// Detail that starts with the full field name.
type blk struct {
	path  string
	def   hcl2.Range
	diags *hcl2.Diagnostics
}

// errCount is the number of error diagnostics so far; comparing it before
// and after converting a field tells whether that field was valid, so
// cross-field checks never quote a default the user did not write.
func (b blk) errCount() int {
	n := 0
	for _, d := range *b.diags {
		if d.Severity == hcl2.DiagError {
			n++
		}
	}
	return n
}

// child returns the view of a nested block.
func (b blk) child(name string, def hcl2.Range) blk {
	p := name
	if b.path != "" {
		p = b.path + " " + name
	}
	return blk{path: p, def: def, diags: b.diags}
}

// field names an argument of this block for a message: "upstream "web" weight".
func (b blk) field(name string) string {
	switch {
	case b.path == "":
		return name
	case name == "":
		return b.path
	}
	return b.path + " " + name
}

// subject is the range a message about attribute a points at: its value, or
// the block's definition when the attribute is absent.
func (b blk) subject(a *hcl2.Attribute) *hcl2.Range {
	if a == nil {
		r := b.def
		return &r
	}
	r := a.Expr.Range()
	return &r
}

func (b blk) add(sev hcl2.DiagnosticSeverity, subject *hcl2.Range, summary, detail string) {
	*b.diags = append(*b.diags, &hcl2.Diagnostic{
		Severity: sev,
		Summary:  summary,
		Detail:   detail,
		Subject:  subject,
	})
}

// errorf reports an error about attribute a (nil: about the block itself,
// then name is used for the field) whose Detail is "<field>: <message>".
func (b blk) errorf(a *hcl2.Attribute, name, summary, format string, args ...any) {
	if a != nil {
		name = a.Name
	}
	b.add(hcl2.DiagError, b.subject(a), summary, b.field(name)+": "+fmt.Sprintf(format, args...))
}

// blockErrorf reports an error about the block as a whole.
func (b blk) blockErrorf(summary, format string, args ...any) {
	b.add(hcl2.DiagError, b.subject(nil), summary, b.path+": "+fmt.Sprintf(format, args...))
}

// value evaluates a (without variables or functions) and converts it to ty.
func (b blk) value(a *hcl2.Attribute, ty cty.Type) (cty.Value, bool) {
	v, ds := a.Expr.Value(nil)
	if ds.HasErrors() {
		for _, d := range ds {
			c := *d
			c.Detail = b.field(a.Name) + ": " + c.Detail
			*b.diags = append(*b.diags, &c)
		}
		return cty.NilVal, false
	}
	if v.IsNull() {
		b.errorf(a, "", "Invalid value", "must not be null.")
		return cty.NilVal, false
	}
	if !v.IsWhollyKnown() {
		b.errorf(a, "", "Invalid value", "value must be known.")
		return cty.NilVal, false
	}
	cv, err := convert.Convert(v, ty)
	if err != nil {
		b.errorf(a, "", "Invalid value type", "%s.", err)
		return cty.NilVal, false
	}
	return cv, true
}

// str returns the string value of a, or def when a is absent or invalid.
func (b blk) str(a *hcl2.Attribute, def string) string {
	s, _ := b.strOK(a, def)
	return s
}

// strOK is str that also reports whether a was present and a valid string.
func (b blk) strOK(a *hcl2.Attribute, def string) (string, bool) {
	if a == nil {
		return def, false
	}
	v, ok := b.value(a, cty.String)
	if !ok {
		return def, false
	}
	return v.AsString(), true
}

// boolean returns the bool value of a, or def.
func (b blk) boolean(a *hcl2.Attribute, def bool) bool {
	if a == nil {
		return def
	}
	v, ok := b.value(a, cty.Bool)
	if !ok {
		return def
	}
	return v.True()
}

// integer returns the whole-number value of a, or def, and reports an error
// unless it lies in [min, max]; the bool reports whether a was present and
// valid. The value is checked as an arbitrary-precision number before it is
// converted, so 1e30 is "out of range", not a conversion failure.
func (b blk) integer(a *hcl2.Attribute, def, min, max int) (int, bool) {
	if a == nil {
		return def, false
	}
	v, ok := b.value(a, cty.Number)
	if !ok {
		return def, false
	}
	f := v.AsBigFloat()
	if !f.IsInt() {
		b.errorf(a, "", "Invalid value", "a whole number is required; got %s.", f.Text('g', -1))
		return def, false
	}
	if f.Cmp(new(big.Float).SetInt64(int64(min))) < 0 || f.Cmp(new(big.Float).SetInt64(int64(max))) > 0 {
		text := f.Text('f', 0)
		if len(text) > 20 {
			text = f.Text('g', 6)
		}
		b.errorf(a, "", "Value out of range", "%s is out of range (%d..%d).", text, min, max)
		return def, false
	}
	n, _ := f.Int64()
	return int(n), true
}

// count is integer for a count that must be at least 1 (thresholds,
// consecutive failures), at most maxCount.
func (b blk) count(a *hcl2.Attribute, def int) int {
	n, _ := b.integer(a, def, 1, maxCount)
	return n
}

// maxCount bounds counters such as thresholds: far beyond any useful value,
// and safe in every int arithmetic the gateway does with them.
const maxCount = math.MaxInt32

// strList returns the list-of-strings value of a (nil when absent). Each
// element is checked by check (nil: any non-empty string), which returns a
// reason or ""; bad elements are reported at their own range and dropped.
func (b blk) strList(a *hcl2.Attribute, check func(string) string) []string {
	if a == nil {
		return nil
	}
	if check == nil {
		check = func(s string) string {
			if s == "" {
				return "list elements must not be empty"
			}
			return ""
		}
	}
	exprs, ds := hcl2.ExprList(a.Expr)
	if ds.HasErrors() {
		b.errorf(a, "", "Invalid value type", "a list of strings is required.")
		return nil
	}
	var out []string
	for _, e := range exprs {
		item := &hcl2.Attribute{Name: a.Name, Expr: e, Range: e.Range(), NameRange: a.NameRange}
		s, ok := b.strOK(item, "")
		if !ok {
			continue
		}
		if why := check(s); why != "" {
			b.errorf(item, "", "Invalid value", "%s.", why)
			continue
		}
		out = append(out, s)
	}
	return out
}

// duration parses a Go duration string ("250ms", "5s", "5m") from a, or
// returns def. Values outside [min, max] are errors that say "out of range"
// with the range; max <= 0 means time.Duration's own maximum (about 292
// years). A well-formed duration too large for time.Duration ("100000000h")
// is out of range too, not malformed.
func (b blk) duration(a *hcl2.Attribute, def, min, max time.Duration) time.Duration {
	if a == nil {
		return def
	}
	v, ok := b.value(a, cty.String)
	if !ok {
		return def
	}
	if max <= 0 {
		max = math.MaxInt64
	}
	s := v.AsString()
	d, err := time.ParseDuration(s)
	switch {
	case err != nil && !durationSyntax.MatchString(s):
		b.errorf(a, "", "Invalid duration", "%q is not a duration; use a number with a unit, such as \"250ms\", \"5s\" or \"5m\".", s)
		return def
	case err != nil || d < min || d > max:
		rng := fmtDuration(min) + ".." + fmtDuration(max)
		if min == positive {
			rng = "greater than 0s, at most " + fmtDuration(max)
		}
		b.errorf(a, "", "Duration out of range", "%q is out of range (%s).", s, rng)
		return def
	}
	return d
}

// durationSyntax is the grammar time.ParseDuration accepts; a string that
// matches it but does not parse overflows time.Duration.
var durationSyntax = regexp.MustCompile(`^[-+]?(0|((\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h))+)$`)

// positive is the min for durations that must be > 0.
const positive = time.Nanosecond

// fmtDuration prints whole minutes and seconds without trailing zero units
// ("10m", "1s"), falling back to time.Duration.String.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// oneOf returns the string value of a (or def) and reports an error when it
// is not in allowed.
func (b blk) oneOf(a *hcl2.Attribute, def string, allowed ...string) string {
	s := b.str(a, def)
	if a == nil {
		return s
	}
	for _, x := range allowed {
		if s == x {
			return s
		}
	}
	b.errorf(a, "", "Invalid value", "must be one of %s; got %q.", strings.Join(allowed, ", "), s)
	return def
}

// file returns the string value of a path attribute and, when non-empty,
// reports an error unless it names a regular file (symbolic links are
// followed). Relative paths are relative to the agent's working directory.
func (b blk) file(a *hcl2.Attribute) string {
	p, _ := b.fileOK(a)
	return p
}

// fileOK is file that also reports whether a named a regular file.
func (b blk) fileOK(a *hcl2.Attribute) (string, bool) {
	p := b.str(a, "")
	if p == "" {
		return "", false
	}
	if summary, why := fileProblem(p); why != "" {
		b.errorf(a, "", summary, "%s.", why)
		return p, false
	}
	return p, true
}

// fileProblem says why path is not a readable regular file (following
// symbolic links), with the operating system's reason, or returns "", "".
func fileProblem(path string) (summary, why string) {
	fi, err := os.Stat(path)
	if err != nil {
		reason := unwrapPathError(err)
		if li, lerr := os.Lstat(path); lerr == nil && li.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(path)
			return "Dangling symbolic link", fmt.Sprintf("%q is a symbolic link to %q, which cannot be read: %v", path, target, reason)
		}
		if os.IsNotExist(err) {
			return "File not found", fmt.Sprintf("cannot read %q: %v", path, reason)
		}
		return "Unreadable file", fmt.Sprintf("cannot read %q: %v", path, reason)
	}
	switch {
	case fi.IsDir():
		return "Not a file", fmt.Sprintf("%q is a directory", path)
	case !fi.Mode().IsRegular():
		return "Not a regular file", fmt.Sprintf("%q is not a regular file (%s)", path, fi.Mode().Type())
	}
	return "", ""
}
