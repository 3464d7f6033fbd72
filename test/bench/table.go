package main

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// Table is a plain-text table: the first column is left-aligned, the
// others right-aligned, columns separated by two spaces, a rule under the
// header. Notes are printed under the table.
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
	Notes  []string
}

// AddRow appends a row; missing cells render empty.
func (t *Table) AddRow(cells ...string) { t.Rows = append(t.Rows, cells) }

// String renders the table.
func (t *Table) String() string {
	cols := len(t.Header)
	for _, r := range t.Rows {
		cols = max(cols, len(r))
	}
	width := make([]int, cols)
	measure := func(r []string) {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	measure(t.Header)
	for _, r := range t.Rows {
		measure(r)
	}
	var b strings.Builder
	if t.Title != "" {
		b.WriteString(t.Title)
		b.WriteByte('\n')
	}
	line := func(r []string) {
		var l strings.Builder
		for i := range cols {
			c := ""
			if i < len(r) {
				c = r[i]
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				l.WriteString("  ")
			}
			if i == 0 {
				l.WriteString(c + pad)
			} else {
				l.WriteString(pad + c)
			}
		}
		b.WriteString(strings.TrimRight(l.String(), " "))
		b.WriteByte('\n')
	}
	if len(t.Header) > 0 {
		line(t.Header)
		total := 2 * (cols - 1)
		for _, w := range width {
			total += w
		}
		b.WriteString(strings.Repeat("-", total))
		b.WriteByte('\n')
	}
	for _, r := range t.Rows {
		line(r)
	}
	for _, n := range t.Notes {
		b.WriteString(n)
		b.WriteByte('\n')
	}
	return b.String()
}

// fmtMS formats milliseconds with about three significant digits.
func fmtMS(ms float64) string {
	switch {
	case math.IsNaN(ms):
		return "–"
	case ms < 10:
		return fmt.Sprintf("%.2f ms", ms)
	case ms < 100:
		return fmt.Sprintf("%.1f ms", ms)
	default:
		return fmt.Sprintf("%.0f ms", ms)
	}
}

// fmtFloat formats x with prec decimals; NaN renders as "–".
func fmtFloat(x float64, prec int) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, x)
}

// fmtRatio formats a ratio as "1.23×"; NaN or Inf render as "–".
func fmtRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", r)
}

// fmtBytes formats a byte count in KiB, MiB or GiB.
func fmtBytes(b float64) string {
	switch {
	case math.IsNaN(b):
		return "–"
	case math.Abs(b) < 1<<20:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	case math.Abs(b) < 1<<30:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	default:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	}
}

// ratio returns a/b, NaN when b is 0 or either is NaN.
func ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

// Verdict judges a measured value against a target bound with the noise
// rule of the benchmark: a gap below noise (0.15 = 15%) between the
// measured value and the bound is not a result.
//
// For an upper bound (atMost): "met" when value <= bound, "≈ (noise)" when
// value <= bound×(1+noise), else "missed". For a lower bound: "met" when
// value >= bound, "≈ (noise)" when value >= bound×(1-noise), else "missed".
func Verdict(value, bound float64, atMost bool, noise float64) string {
	switch {
	case math.IsNaN(value) || math.IsNaN(bound):
		return "n/a"
	case atMost && value <= bound, !atMost && value >= bound:
		return "met"
	case atMost && value <= bound*(1+noise), !atMost && value >= bound*(1-noise):
		return "≈ (noise)"
	default:
		return "missed"
	}
}
