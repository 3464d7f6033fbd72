package hcl

import (
	"fmt"
	"strings"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// Labelled blocks, for checkLabels: gohcl decodes a label into a string and
// drops its source range, so the labels are read again from the body.
var (
	topLabelled = &hcl2.BodySchema{Blocks: []hcl2.BlockHeaderSchema{
		{Type: "listener", LabelNames: []string{"name"}},
		{Type: "upstream", LabelNames: []string{"name"}},
	}}
	upstreamLabelled = &hcl2.BodySchema{Blocks: []hcl2.BlockHeaderSchema{
		{Type: "backend", LabelNames: []string{"name"}},
	}}
)

// checkLabels reports every empty (or blank) block label of body at the
// label's own range: a name is how listeners, upstreams and backends are
// told apart in merges, metrics and the control API. The schema errors of
// this second reading are gohcl's too and are not repeated.
func checkLabels(body hcl2.Body, diags *hcl2.Diagnostics) {
	content, _, _ := body.PartialContent(topLabelled)
	for _, b := range content.Blocks {
		checkLabel(b, "", diags)
		if b.Type != "upstream" || len(b.Labels) == 0 {
			continue
		}
		inner, _, _ := b.Body.PartialContent(upstreamLabelled)
		for _, ib := range inner.Blocks {
			checkLabel(ib, fmt.Sprintf("%s %q ", b.Type, b.Labels[0]), diags)
		}
	}
}

func checkLabel(b *hcl2.Block, parent string, diags *hcl2.Diagnostics) {
	if len(b.Labels) == 0 || strings.TrimSpace(b.Labels[0]) != "" {
		return
	}
	r := b.LabelRanges[0]
	*diags = append(*diags, &hcl2.Diagnostic{
		Severity: hcl2.DiagError,
		Summary:  "Empty label",
		Detail:   fmt.Sprintf("%s%s %q: %s needs a name, as in %s %q.", parent, b.Type, b.Labels[0], labelNeed[b.Type], b.Type, exampleLabel[b.Type]),
		Subject:  &r,
	})
}

var labelNeed = map[string]string{"listener": "a listener", "upstream": "an upstream", "backend": "a backend"}

var exampleLabel = map[string]string{"listener": "public", "upstream": "web", "backend": "web-1"}
