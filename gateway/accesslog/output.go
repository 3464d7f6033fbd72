package accesslog

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Paths that name the process's standard streams rather than a file.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// Formats of a line.
const (
	// FormatJSON is one JSON object per line (README "Access log").
	FormatJSON = "json"
	// FormatCombined is the NCSA combined log format of Apache and nginx.
	FormatCombined = "combined"
)

// FileMode is the mode of a log file the gateway creates: client
// addresses and paths are not for every local user.
const FileMode = 0o640

// Config is what a log writes and where.
type Config struct {
	// Path is Stdout, Stderr or a file, appended to (created with
	// FileMode when missing) and opened again by Reopen.
	Path string
	// Writer, when set, receives the lines instead of Path (which only
	// names it in messages); it is neither closed nor reopened. For tests
	// and embedding.
	Writer io.Writer
	// Format is FormatJSON ("" too) or FormatCombined.
	Format string
	// IncludeQuery logs the query string; off by default because queries
	// carry secrets (tokens, signatures).
	IncludeQuery bool
	// Buffer is the number of entries waiting for the writer before more
	// are dropped (≤ 0: DefaultBuffer); read when the log starts (New).
	Buffer int
}

// OpenError is a log file that cannot be opened for appending.
type OpenError struct {
	Path string
	Err  error
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("access log: cannot open %q for appending: %v", e.Path, e.Err)
}

func (e *OpenError) Unwrap() error { return e.Err }

// Output is an opened destination with its format; the writer goroutine
// owns it once handed to New or Switch.
type Output struct {
	cfg   Config
	w     io.Writer
	file  *os.File // nil: not the log's to close
	torn  bool     // the last write stopped inside a line
	json  bool
	query bool
}

// Open opens cfg's destination. Errors: an unknown format; a file that
// cannot be opened for appending (*OpenError).
func Open(cfg Config) (*Output, error) {
	o := &Output{cfg: cfg, query: cfg.IncludeQuery}
	switch cfg.Format {
	case "", FormatJSON:
		o.json = true
	case FormatCombined:
	default:
		return nil, fmt.Errorf("access log: unknown format %q (want %q or %q)", cfg.Format, FormatJSON, FormatCombined)
	}
	switch {
	case cfg.Writer != nil:
		o.w = cfg.Writer
	case cfg.Path == Stdout || cfg.Path == "":
		o.w = os.Stdout
	case cfg.Path == Stderr:
		o.w = os.Stderr
	default:
		f, err := os.OpenFile(cfg.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, FileMode)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, &OpenError{Path: cfg.Path, Err: err}
		}
		o.w, o.file = f, f
	}
	return o, nil
}

// Close closes an output never handed to a Log (nil: nothing to do); a
// Log closes its own.
func (o *Output) Close() { o.close() }

// close closes the output's file, if it is the log's own.
func (o *Output) close() {
	if o != nil && o.file != nil {
		_ = o.file.Close()
	}
}

// format appends e as one line in the output's format.
func (o *Output) format(b []byte, e *Entry) []byte {
	if o.json {
		return appendJSON(b, e, o.query)
	}
	return appendCombined(b, e, o.query)
}
