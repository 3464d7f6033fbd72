package hcl

import (
	"fmt"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// Traffic splits (README "Traffic splits"): split blocks and sticky in
// upstream.route send the route's requests to other upstreams by weight,
// each with its own health, limits, retries and timeouts (the gateway's
// splits.go). Checked here: weights ≥ 0 and not all 0, no upstream twice,
// no redirect on the same route, a valid sticky key, and (once every
// upstream is known, checkSplitUpstreams) each named upstream defined.

// MaxSplitWeight bounds a split's weight: far beyond any useful ratio,
// and safe in the gateway's 64-bit sums.
const MaxSplitWeight = 1_000_000

// rawSplit is upstream.route.split.
type rawSplit struct {
	DefRange hcl2.Range      `hcl:",def_range"`
	Upstream *hcl2.Attribute `hcl:"upstream,optional"`
	Weight   *hcl2.Attribute `hcl:"weight,optional"`
}

// Split is upstream.route.split: Upstream gets Weight / (the sum of the
// route's weights) of the route's requests.
type Split struct {
	// Upstream names a defined upstream (any, the route's own included).
	Upstream string
	// Weight is 0..MaxSplitWeight (required; 0: never chosen).
	Weight int
	// Range is the upstream argument's value range (the block's when
	// absent), where an undefined upstream is reported.
	Range hcl2.Range
}

// buildRouteSplits converts a route's split blocks and sticky.
func buildRouteSplits(b blk, r *rawRoute, rt *Route) {
	seen := map[string]hcl2.Range{}
	total, before := 0, b.errCount()
	for _, rs := range r.Splits {
		sb := b.child("split", rs.DefRange)
		s := Split{Range: rs.DefRange}
		if rs.Upstream == nil {
			sb.blockErrorf("Missing upstream", "a split needs upstream = \"NAME\".")
		} else {
			s.Range = rs.Upstream.Expr.Range()
			if name, ok := sb.strOK(rs.Upstream, ""); ok {
				if name == "" {
					sb.errorf(rs.Upstream, "", "Invalid upstream", "an upstream name is required.")
				} else if prev, dup := seen[name]; dup {
					sb.errorf(rs.Upstream, "", "Duplicate split", "upstream %q already has a split of this route at %s; give it one split with the sum of the weights.", name, posString(prev))
				} else {
					seen[name] = s.Range
				}
				s.Upstream = name
			}
		}
		if rs.Weight == nil {
			sb.blockErrorf("Missing weight", "a split needs weight = N (0..%d).", MaxSplitWeight)
		} else if w, ok := sb.integer(rs.Weight, 0, 0, MaxSplitWeight); ok {
			s.Weight = w
			total += w
		}
		rt.Splits = append(rt.Splits, s)
	}
	if len(r.Splits) > 0 && total == 0 && b.errCount() == before {
		b.child("split", r.Splits[0].DefRange).blockErrorf("Weights sum to 0", "the route's split weights sum to 0; at least one split needs a weight above 0.")
	}
	if len(r.Splits) > 0 && len(r.Redirects) > 0 {
		rb := b.child("redirect", r.Redirects[0].DefRange)
		rb.blockErrorf("Split on a redirect", "a redirect route reaches no upstream; remove its split blocks or its redirect.")
	}
	if sticky, ok := b.strOK(r.Sticky, ""); ok && sticky != "" {
		switch {
		case len(r.Splits) == 0:
			b.errorf(r.Sticky, "", "Sticky without splits", "sticky keeps a client on one split; the route has no split blocks.")
		default:
			if why := checkHashOn(sticky); why != "" {
				b.errorf(r.Sticky, "", "Invalid sticky", "%s.", why)
			}
		}
		rt.Sticky = sticky
	}
}

// checkSplitUpstreams reports each split naming an upstream that is not
// defined (ups are the upstreams built, names their names).
func checkSplitUpstreams(top blk, ups []Upstream, names map[string]hcl2.Range) {
	for _, u := range ups {
		for _, rt := range u.Routes {
			for _, s := range rt.Splits {
				if _, ok := names[s.Upstream]; ok || s.Upstream == "" {
					continue
				}
				b := top.child(fmt.Sprintf("upstream %q route split", u.Name), s.Range)
				b.errorf(nil, "upstream", "Unknown upstream", "no upstream named %q is defined.", s.Upstream)
			}
		}
	}
}
