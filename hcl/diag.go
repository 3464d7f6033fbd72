package hcl

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// posString renders the start of r as "file:line:column".
func posString(r hcl2.Range) string {
	return fmt.Sprintf("%s:%d:%d", r.Filename, r.Start.Line, r.Start.Column)
}

// FormatDiagnostic renders one diagnostic on one line:
//
//	file:line:column: summary: detail
//
// Warnings read "file:line:column: warning: summary: detail". A diagnostic
// without a source range starts with its summary. Line breaks in the detail
// become spaces.
func FormatDiagnostic(d *hcl2.Diagnostic) string {
	var sb strings.Builder
	if d.Subject != nil {
		sb.WriteString(posString(*d.Subject))
		sb.WriteString(": ")
	}
	if d.Severity == hcl2.DiagWarning {
		sb.WriteString("warning: ")
	}
	sb.WriteString(d.Summary)
	if d.Detail != "" {
		sb.WriteString(": ")
		sb.WriteString(strings.Join(strings.Fields(d.Detail), " "))
	}
	return sb.String()
}

// WriteDiagnosticLines writes diags to w, one FormatDiagnostic line each,
// in the order given (Load and Parse return them sorted by file and position).
func WriteDiagnosticLines(w io.Writer, diags hcl2.Diagnostics) error {
	for _, d := range diags {
		if _, err := fmt.Fprintln(w, FormatDiagnostic(d)); err != nil {
			return err
		}
	}
	return nil
}

// FormatDiagnostics writes diags to w in hcl/v2's human format
// (hcl2.NewDiagnosticTextWriter): severity, summary, file:line,column, the
// source snippet from files (as returned by (*Loader).Files; nil prints no
// snippets) and the detail, wrapped at width columns (0: no wrapping), with
// VT100 colors when color is set.
func FormatDiagnostics(w io.Writer, files map[string]*hcl2.File, diags hcl2.Diagnostics, width uint, color bool) error {
	return hcl2.NewDiagnosticTextWriter(w, files, width, color).WriteDiagnostics(diags)
}

// WriteDiagnostics is FormatDiagnostics with the sources this Loader read.
func (l *Loader) WriteDiagnostics(w io.Writer, diags hcl2.Diagnostics, width uint, color bool) error {
	return FormatDiagnostics(w, l.Files(), diags, width, color)
}

// clampRanges replaces each diagnostic range that does not lie in its file
// (bytes past the end, or a line and column that are not where its byte
// offset is) with the same bytes, clamped to the file, at their true
// positions, widened to whole characters: file:line:column always names a
// place in the input. hcl's JSON parser reports an unterminated string one
// byte past the end (the file `"` gets bytes 1..2 of 1), a string running
// over a line break on the line it started, and an invalid character by its
// first byte only (all found by FuzzParse). Ranges are copied, never changed in
// place: they may be shared with the syntax tree.
func clampRanges(diags hcl2.Diagnostics, files map[string]*hcl2.File) {
	for _, d := range diags {
		for _, r := range []**hcl2.Range{&d.Subject, &d.Context} {
			if *r == nil {
				continue
			}
			f := files[(*r).Filename]
			if f == nil || rangeIn(**r, f.Bytes) {
				continue
			}
			c := **r
			src := f.Bytes
			end := min(max(c.End.Byte, 0), len(src))
			start := min(max(c.Start.Byte, 0), end)
			for start > 0 && start < len(src) && !utf8.RuneStart(src[start]) {
				start--
			}
			for end < len(src) && !utf8.RuneStart(src[end]) {
				end++
			}
			c.Start, c.End = posAt(src, start), posAt(src, end)
			*r = &c
		}
	}
}

// rangeIn reports whether r's offsets are ordered and inside src, each
// end's line is the one its offset is on, its column within that line, and
// (in UTF-8 text) the offset starts a character.
func rangeIn(r hcl2.Range, src []byte) bool {
	if r.Start.Byte < 0 || r.Start.Byte > r.End.Byte || r.End.Byte > len(src) {
		return false
	}
	text := utf8.Valid(src)
	for _, p := range []hcl2.Pos{r.Start, r.End} {
		if text && p.Byte < len(src) && !utf8.RuneStart(src[p.Byte]) {
			return false
		}
		lineStart := bytes.LastIndexByte(src[:p.Byte], '\n') + 1
		if p.Line != bytes.Count(src[:p.Byte], []byte("\n"))+1 || p.Column < 1 || p.Column > p.Byte-lineStart+1 {
			return false
		}
	}
	return true
}

// posAt is the position of byte offset off (0..len(src)) of src: lines
// counted from 1, columns in characters from 1.
func posAt(src []byte, off int) hcl2.Pos {
	lineStart := bytes.LastIndexByte(src[:off], '\n') + 1
	return hcl2.Pos{
		Line:   bytes.Count(src[:off], []byte("\n")) + 1,
		Column: utf8.RuneCount(src[lineStart:off]) + 1,
		Byte:   off,
	}
}
