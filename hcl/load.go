package hcl

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	hcl2 "github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
)

// Loader reads configuration files and remembers the sources of its latest
// Load or Parse so that diagnostics can be printed with snippets
// (WriteDiagnostics). Each Load or Parse rereads its files from scratch. The
// zero Loader is ready to use. A Loader is not safe for concurrent use.
type Loader struct {
	// LookupEnv reads the CONSUL_HTTP_* defaults; nil means the package-level
	// LookupEnv (os.LookupEnv unless replaced).
	LookupEnv func(string) (string, bool)

	parser *hclparse.Parser
}

// NewLoader returns a Loader that reads the environment through the
// package-level LookupEnv.
func NewLoader() *Loader {
	return &Loader{}
}

// Load reads and merges the configuration at paths with a fresh Loader. See
// (*Loader).Load.
func Load(paths []string) (*Config, hcl2.Diagnostics) {
	return NewLoader().Load(paths)
}

// Parse decodes one in-memory file with a fresh Loader. See (*Loader).Parse.
func Parse(filename string, src []byte) (*Config, hcl2.Diagnostics) {
	return NewLoader().Parse(filename, src)
}

// Load reads every path in order: a file is read as HCL whatever its name; a
// directory contributes every "*.hcl" file directly inside it, in lexical
// order (subdirectories are ignored; an empty directory is an error). A file
// named twice is read once. The files are merged as Consul merges config
// directories:
//
//   - a top-level argument (log_level, log_json, drain_timeout) may be set in
//     one file only; a second one is an error naming both positions;
//   - a singleton block (consul, control, telemetry) may appear in one file
//     only, same error;
//   - listener and upstream blocks add up; a duplicate label is an error
//     naming both file:line:column positions.
//
// The merged configuration is then defaulted and validated. The Config is
// nil when the diagnostics contain an error; warnings are returned in the
// diagnostics and kept in Config.Warnings. Diagnostics are sorted by file
// (in load order) and position.
func (l *Loader) Load(paths []string) (*Config, hcl2.Diagnostics) {
	l.parser = hclparse.NewParser()
	var diags hcl2.Diagnostics
	var files []string
	seen := map[string]bool{}
	addFile := func(f string) {
		if key := filepath.Clean(f); !seen[key] {
			seen[key] = true
			files = append(files, f)
		}
	}
	if len(paths) == 0 {
		diags = append(diags, &hcl2.Diagnostic{
			Severity: hcl2.DiagError,
			Summary:  "No configuration",
			Detail:   "no configuration file or directory was given.",
		})
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			diags = append(diags, fileError(p, "Cannot read configuration", err))
			continue
		}
		if !fi.IsDir() {
			addFile(p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			diags = append(diags, fileError(p, "Cannot read configuration directory", err))
			continue
		}
		n := 0
		for _, e := range entries { // os.ReadDir sorts by name
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".hcl") {
				continue
			}
			addFile(filepath.Join(p, e.Name()))
			n++
		}
		if n == 0 {
			diags = append(diags, &hcl2.Diagnostic{
				Severity: hcl2.DiagError,
				Summary:  "Empty configuration directory",
				Detail:   fmt.Sprintf("%s: no *.hcl files in the directory.", p),
			})
		}
	}

	m := newMerger()
	for _, f := range files {
		file, ds := l.parser.ParseHCLFile(f)
		diags = append(diags, ds...)
		if ds.HasErrors() || file == nil {
			continue
		}
		m.add(file, &diags)
	}
	return l.finish(m, files, diags)
}

// Parse decodes, defaults and validates a single configuration held in
// memory; filename is used in diagnostics only. Results are as for Load.
func (l *Loader) Parse(filename string, src []byte) (*Config, hcl2.Diagnostics) {
	l.parser = hclparse.NewParser()
	file, diags := l.parser.ParseHCL(src, filename)
	m := newMerger()
	if !diags.HasErrors() && file != nil {
		m.add(file, &diags)
	}
	return l.finish(m, []string{filename}, diags)
}

// Files returns the files parsed by the latest Load or Parse by name, for
// FormatDiagnostics / hcl2.NewDiagnosticTextWriter (nil before the first).
func (l *Loader) Files() map[string]*hcl2.File {
	if l.parser == nil {
		return nil
	}
	return l.parser.Files()
}

func (l *Loader) finish(m *merger, files []string, diags hcl2.Diagnostics) (*Config, hcl2.Diagnostics) {
	env := l.LookupEnv
	if env == nil {
		env = LookupEnv
	}
	cfg := build(&m.raw, env, &diags)
	sortDiagnostics(diags, files)
	if diags.HasErrors() {
		return nil, diags
	}
	cfg.Files = files
	for _, d := range diags {
		if d.Severity == hcl2.DiagWarning {
			cfg.Warnings = append(cfg.Warnings, d)
		}
	}
	return cfg, diags
}

// merger accumulates decoded files into one raw configuration.
type merger struct {
	raw rawFile
}

func newMerger() *merger { return &merger{} }

// add decodes file and merges it into m.raw, reporting schema errors and
// cross-file duplicates into diags. Listener and upstream duplicates are
// reported later by build, which sees blocks from every file.
func (m *merger) add(file *hcl2.File, diags *hcl2.Diagnostics) {
	var f rawFile
	*diags = append(*diags, gohcl.DecodeBody(file.Body, nil, &f)...)
	f.collapse(diags)

	mergeAttr(&m.raw.LogLevel, f.LogLevel, diags)
	mergeAttr(&m.raw.LogJSON, f.LogJSON, diags)
	mergeAttr(&m.raw.DrainTimeout, f.DrainTimeout, diags)
	mergeAttr(&m.raw.NormalizePath, f.NormalizePath, diags)
	mergeAttr(&m.raw.MergeSlashes, f.MergeSlashes, diags)
	mergeAttr(&m.raw.EscapedSlashes, f.EscapedSlashes, diags)
	mergeBlock(&m.raw.Consul, f.Consul, "consul", func(b *rawConsul) hcl2.Range { return b.DefRange }, diags)
	mergeBlock(&m.raw.Control, f.Control, "control", func(b *rawControl) hcl2.Range { return b.DefRange }, diags)
	mergeBlock(&m.raw.Telemetry, f.Telemetry, "telemetry", func(b *rawTelemetry) hcl2.Range { return b.DefRange }, diags)
	m.raw.Listeners = append(m.raw.Listeners, f.Listeners...)
	m.raw.Upstreams = append(m.raw.Upstreams, f.Upstreams...)
}

// mergeAttr keeps the first definition of a top-level argument and reports
// any later one.
func mergeAttr(dst **hcl2.Attribute, src *hcl2.Attribute, diags *hcl2.Diagnostics) {
	switch {
	case src == nil:
	case *dst == nil:
		*dst = src
	default:
		*diags = append(*diags, &hcl2.Diagnostic{
			Severity: hcl2.DiagError,
			Summary:  "Duplicate argument",
			Detail: fmt.Sprintf("%s: already set at %s; a top-level argument may be set in only one file.",
				src.Name, posString((*dst).NameRange)),
			Subject: src.NameRange.Ptr(),
		})
	}
}

// mergeBlock keeps the first singleton block and reports any later one.
func mergeBlock[T any](dst **T, src *T, name string, rng func(*T) hcl2.Range, diags *hcl2.Diagnostics) {
	switch {
	case src == nil:
	case *dst == nil:
		*dst = src
	default:
		r := rng(src)
		*diags = append(*diags, &hcl2.Diagnostic{
			Severity: hcl2.DiagError,
			Summary:  fmt.Sprintf("Duplicate %s block", name),
			Detail: fmt.Sprintf("%s: a %s block is already defined at %s; only one is allowed across all files.",
				name, name, posString(rng(*dst))),
			Subject: &r,
		})
	}
}

func fileError(path, summary string, err error) *hcl2.Diagnostic {
	return &hcl2.Diagnostic{
		Severity: hcl2.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf("%s: %v.", path, unwrapPathError(err)),
	}
}

// unwrapPathError drops the path and operation of an *os.PathError, which the
// message already names.
func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// sortDiagnostics orders diagnostics without a source range first, then by
// file (in load order; unknown files after, by name) and position. The sort
// is stable so equal positions keep their order of discovery.
func sortDiagnostics(diags hcl2.Diagnostics, files []string) {
	order := make(map[string]int, len(files))
	for i, f := range files {
		order[f] = i + 1
	}
	rank := func(f string) int {
		if n, ok := order[f]; ok {
			return n
		}
		return len(files) + 1
	}
	sort.SliceStable(diags, func(i, j int) bool {
		a, b := diags[i].Subject, diags[j].Subject
		switch {
		case a == nil || b == nil:
			return a == nil && b != nil
		case a.Filename != b.Filename:
			if ra, rb := rank(a.Filename), rank(b.Filename); ra != rb {
				return ra < rb
			}
			return a.Filename < b.Filename
		default:
			return a.Start.Byte < b.Start.Byte
		}
	})
}
