package agent

import (
	"github.com/impulse-agent/impulse-agent/gateway/route"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// pathOptions converts the top-level path settings. hcl has validated
// EscapedSlashes; an unknown word would fall back to "reject", the safe
// choice.
func pathOptions(p hcl.Paths) route.PathOptions {
	es, _ := route.ParseEscapedSlashes(p.EscapedSlashes)
	return route.PathOptions{ForwardAsSent: !p.NormalizePath, MergeSlashes: p.MergeSlashes, EscapedSlashes: es}
}
