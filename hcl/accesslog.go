package hcl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// Access log destinations that are not files, and the formats.
const (
	AccessLogStdout   = "stdout"
	AccessLogStderr   = "stderr"
	AccessLogJSON     = "json"
	AccessLogCombined = "combined"
)

// AccessLog is the top-level access_log block (README "Access log").
type AccessLog struct {
	// Path is "stdout" (the default), "stderr" or a file the agent appends
	// to, created when missing and opened again on SIGUSR1 and reload.
	// Relative paths are relative to the agent's working directory.
	Path string
	// Format is "json" (the default) or "combined" (NCSA combined).
	Format string
	// IncludeQuery logs query strings (default false: they carry secrets
	// such as tokens and signatures).
	IncludeQuery bool
	// PathRange is the source range of path (zero when absent), for a file
	// the agent cannot open when it applies the configuration.
	PathRange hcl2.Range
}

// rawAccessLog is the top-level access_log block.
type rawAccessLog struct {
	DefRange hcl2.Range `hcl:",def_range"`

	Path         *hcl2.Attribute `hcl:"path,optional"`
	Format       *hcl2.Attribute `hcl:"format,optional"`
	IncludeQuery *hcl2.Attribute `hcl:"include_query,optional"`
}

func (r *rawAccessLog) defRange() hcl2.Range { return r.DefRange }

// buildAccessLog converts the access_log block (nil: no access log). A
// file path must be one the agent can append to now: an existing file is
// opened for appending, a missing one created (and removed again).
func buildAccessLog(top blk, r *rawAccessLog) *AccessLog {
	if r == nil {
		return nil
	}
	b := top.child("access_log", r.DefRange)
	a := &AccessLog{
		Path:         b.str(r.Path, AccessLogStdout),
		Format:       b.oneOf(r.Format, AccessLogJSON, AccessLogJSON, AccessLogCombined),
		IncludeQuery: b.boolean(r.IncludeQuery, false),
		PathRange:    rangeOf(r.Path),
	}
	switch {
	case r.Path == nil, a.Path == AccessLogStdout, a.Path == AccessLogStderr:
	case a.Path == "":
		b.errorf(r.Path, "", "Invalid value", `must not be empty; use "stdout", "stderr" or a file (remove the block to turn the access log off).`)
	default:
		if why := appendProblem(a.Path); why != "" {
			b.errorf(r.Path, "", "Unwritable access log", "%s.", why)
		}
	}
	return a
}

// appendProblem says why path cannot be opened for appending (created
// when missing), with the operating system's reason, or returns "". A file
// it creates to find out is removed again: validate leaves nothing behind.
func appendProblem(path string) string {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o640)
	if err == nil {
		f.Close()
		_ = os.Remove(path)
		return ""
	}
	if errors.Is(err, fs.ErrExist) {
		if f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640); err == nil {
			f.Close()
			return ""
		}
	}
	return fmt.Sprintf("cannot open %q for appending: %v", path, unwrapPathError(err))
}
