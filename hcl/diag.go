package hcl

import (
	"fmt"
	"io"
	"strings"

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
