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

// Load reads every path in order. A file given by name is read whatever its
// name: as HCL's JSON syntax when it ends in ".json", as native HCL
// otherwise. A directory contributes every "*.hcl" and "*.json" file directly
// inside it, in lexical order, skipping names that start with "." (editor
// lock and backup files such as ".#web.hcl" or ".web.hcl.swp") and
// subdirectories; symbolic links are followed, and one that leads nowhere is
// an error with the operating system's reason. A directory without such
// files is an error. A file named twice is read once. The files are merged
// as Consul merges config directories:
//
//   - a top-level argument (log_level, log_json, drain_timeout) may be set in
//     one file only; a second one is an error naming both positions;
//   - a singleton block (consul, control, telemetry) may appear in one file
//     only, same error;
//   - listener and upstream blocks add up; a duplicate label is an error
//     naming both file:line:column positions.
//
// The merged configuration is then defaulted and validated; it must have at
// least one listener, and every TLS file it names must load (LoadKeyPair,
// LoadCertPool). The Config is nil when the diagnostics contain an error;
// warnings are returned in the diagnostics and kept in Config.Warnings.
// Diagnostics are sorted by file (in load order) and position.
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
			_, why := fileProblem(p)
			diags = append(diags, &hcl2.Diagnostic{Severity: hcl2.DiagError, Summary: "Cannot read configuration", Detail: why + "."})
			continue
		}
		if !fi.IsDir() {
			addFile(p)
			continue
		}
		n := 0
		for _, f := range l.dirFiles(p, &diags) {
			addFile(f)
			n++
		}
		if n == 0 {
			diags = append(diags, &hcl2.Diagnostic{
				Severity: hcl2.DiagError,
				Summary:  "Empty configuration directory",
				Detail:   fmt.Sprintf("%s: no *.hcl or *.json files in the directory (names starting with \".\" are skipped).", p),
			})
		}
	}

	m := newMerger()
	m.unparsed = diags.HasErrors() // a path that could not be read
	for _, f := range files {
		// Read here rather than by hclparse, whose message drops the OS reason.
		src, err := os.ReadFile(f)
		if err != nil {
			diags = append(diags, fileError(f, "Cannot read configuration", err))
			m.unparsed = true
			continue
		}
		var file *hcl2.File
		var ds hcl2.Diagnostics
		if isJSON(f) {
			file, ds = l.parser.ParseJSON(src, f)
		} else {
			file, ds = l.parser.ParseHCL(src, f)
		}
		diags = append(diags, ds...)
		if ds.HasErrors() || file == nil {
			m.unparsed = true
			continue
		}
		m.add(file, &diags)
	}
	return l.finish(m, files, diags)
}

// dirFiles lists the configuration files directly inside dir, in lexical
// order, reporting unreadable entries into diags (see Load).
func (l *Loader) dirFiles(dir string, diags *hcl2.Diagnostics) []string {
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		*diags = append(*diags, fileError(dir, "Cannot read configuration directory", err))
		return nil
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".hcl") || isJSON(name)) || e.IsDir() {
			continue
		}
		full := filepath.Join(dir, name)
		if e.Type().IsRegular() {
			out = append(out, full)
			continue
		}
		// A symbolic link or a special file: judge what it leads to.
		fi, err := os.Stat(full)
		switch {
		case err != nil:
			_, why := fileProblem(full)
			*diags = append(*diags, &hcl2.Diagnostic{Severity: hcl2.DiagError, Summary: "Cannot read configuration", Detail: why + "."})
		case fi.IsDir():
		case !fi.Mode().IsRegular():
			*diags = append(*diags, &hcl2.Diagnostic{Severity: hcl2.DiagWarning, Summary: "Skipped configuration file",
				Detail: fmt.Sprintf("%q is not a regular file (%s); only regular files are read.", full, fi.Mode().Type())})
		default:
			out = append(out, full)
		}
	}
	return out
}

// isJSON reports whether a configuration file name selects HCL's JSON syntax.
func isJSON(name string) bool { return strings.HasSuffix(name, ".json") }

// Parse decodes, defaults and validates a single configuration held in
// memory, as JSON when filename ends in ".json"; filename is used in
// diagnostics only. Results are as for Load.
func (l *Loader) Parse(filename string, src []byte) (*Config, hcl2.Diagnostics) {
	l.parser = hclparse.NewParser()
	var file *hcl2.File
	var diags hcl2.Diagnostics
	if isJSON(filename) {
		file, diags = l.parser.ParseJSON(src, filename)
	} else {
		file, diags = l.parser.ParseHCL(src, filename)
	}
	m := newMerger()
	if !diags.HasErrors() && file != nil {
		m.add(file, &diags)
	} else {
		m.unparsed = true
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
	if len(m.raw.Listeners) == 0 && !m.unparsed && len(files) > 0 {
		// A file that did not parse may hold the listener; otherwise a
		// truncated or emptied file would take every listener down on
		// reload.
		r := hcl2.Range{Filename: files[0], Start: hcl2.Pos{Line: 1, Column: 1}, End: hcl2.Pos{Line: 1, Column: 1}}
		diags = append(diags, &hcl2.Diagnostic{
			Severity: hcl2.DiagError,
			Summary:  "No listener",
			Detail: fmt.Sprintf("no listener block in any of: %s; the gateway would accept no traffic. Add one, as in "+
				"listener \"public\" { address = \"0.0.0.0:8443\" tls { cert_file = \"cert.pem\" key_file = \"key.pem\" } }.",
				strings.Join(files, ", ")),
			Subject: &r,
		})
	}
	if l.parser != nil {
		clampRanges(diags, l.parser.Files())
	}
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
	// unparsed is set when a file could not be read or had syntax errors:
	// its blocks are unknown.
	unparsed bool
}

func newMerger() *merger { return &merger{} }

// add decodes file and merges it into m.raw, reporting schema errors and
// cross-file duplicates into diags. Listener and upstream duplicates are
// reported later by build, which sees blocks from every file.
func (m *merger) add(file *hcl2.File, diags *hcl2.Diagnostics) {
	var f rawFile
	*diags = append(*diags, gohcl.DecodeBody(file.Body, nil, &f)...)
	checkLabels(file.Body, diags)
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
	mergeBlock(&m.raw.Limits, f.Limits, "limits", func(b *rawGlobalLimits) hcl2.Range { return b.DefRange }, diags)
	mergeBlock(&m.raw.Tracing, f.Tracing, "tracing", func(b *rawTracing) hcl2.Range { return b.DefRange }, diags)
	mergeBlock(&m.raw.AccessLog, f.AccessLog, "access_log", func(b *rawAccessLog) hcl2.Range { return b.DefRange }, diags)
	mergeBlock(&m.raw.Connect, f.Connect, "connect", func(b *rawConnect) hcl2.Range { return b.DefRange }, diags)
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
		Detail:   fmt.Sprintf("cannot read %q: %v.", path, unwrapPathError(err)),
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
