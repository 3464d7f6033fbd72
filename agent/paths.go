package agent

import (
	"github.com/impulse-agent/impulse-agent/hcl"
	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

// pathOptions converts the top-level path settings. hcl has validated
// EscapedSlashes; an unknown word would fall back to "reject", the safe
// choice.
func pathOptions(p hcl.Paths) pathnorm.PathOptions {
	es, _ := pathnorm.ParseEscapedSlashes(p.EscapedSlashes)
	return pathnorm.PathOptions{ForwardAsSent: !p.NormalizePath, MergeSlashes: p.MergeSlashes, EscapedSlashes: es}
}
