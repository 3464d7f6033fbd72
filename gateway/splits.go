package gateway

import (
	"fmt"
	"net/http"

	"github.com/impulse-agent/impulse-agent/gateway/balance"
	weighted "github.com/impulse-agent/impulse-agent/gateway/split"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// Traffic splits (README "Traffic splits", issue 24 item 4): a route with
// splits sends each request to one of several upstreams by weight
// (package split decides), sticky by a hash key when the route has one.
// The split only chooses the upstream; everything after is that
// upstream's, as for a request routed to it directly:
//
//	route → IP rules → early data → redirect → preflight → authentication
//	(the route's own, recorded with the route's upstream) → [split: the
//	upstream] → rate limits → request rules → limits → pick → attempts
//
// The rate limit, concurrency limits, body limit, health, outlier
// detection, retries, timeouts and per-upstream metrics are the chosen
// upstream's; the route's own overrides (route_policies.go) apply on top,
// whichever split is chosen. A split whose upstream has no eligible
// backend (none healthy, all ejected, discovery pending or empty) is
// skipped and its share goes to the others by weight (Traefik's weighted
// round robin skips a service with no healthy server); when none has one,
// the first choice stands and answers 503 as usual. A route without
// splits looks nothing up (routeEdge.split is nil).

// routeSplit is a route's compiled splits: ups[i] is split i's upstream.
type routeSplit struct {
	choice *weighted.Chooser
	ups    []*upstream.Upstream
	// sticky is the route's hash key (zero: none); a request without the
	// key is spread by weight as if the route had none.
	sticky balance.HashKey
}

// buildSplit compiles rc's splits against the next table's upstreams
// (nil, nil when rc has none). Errors: a split naming an undefined
// upstream, twice the same upstream, a negative weight, weights summing
// to 0, splits with a redirect, a bad sticky key — all of which the
// agent's checks refuse first.
func buildSplit(rc RouteConfig, ups map[string]*upstream.Upstream) (*routeSplit, error) {
	if len(rc.Splits) == 0 {
		if rc.Sticky != "" {
			return nil, fmt.Errorf("sticky %q needs splits", rc.Sticky)
		}
		return nil, nil
	}
	if rc.Redirect != nil {
		return nil, fmt.Errorf("a route with a redirect cannot have splits")
	}
	s := &routeSplit{ups: make([]*upstream.Upstream, len(rc.Splits))}
	weights := make([]int, len(rc.Splits))
	for i, sc := range rc.Splits {
		u := ups[sc.Upstream]
		if u == nil {
			return nil, fmt.Errorf("split %d: upstream %q is not defined", i, sc.Upstream)
		}
		for _, prev := range s.ups[:i] {
			if prev == u {
				return nil, fmt.Errorf("split %d: upstream %q is split to twice", i, sc.Upstream)
			}
		}
		s.ups[i], weights[i] = u, sc.Weight
	}
	var err error
	if s.choice, err = weighted.New(weights); err != nil {
		return nil, err
	}
	if rc.Sticky != "" {
		if s.sticky, err = balance.ParseHashKey(rc.Sticky); err != nil {
			return nil, fmt.Errorf("sticky: %w", err)
		}
	}
	return s, nil
}

// choose is the upstream of request r: by r's sticky key's hash, or the
// route's next point by weight; splits that cannot serve skipped. It
// does not allocate.
func (s *routeSplit) choose(r *http.Request) *upstream.Upstream {
	x, ok := s.sticky.Hash(r)
	if !ok {
		x = s.choice.Next()
	}
	return s.ups[s.choice.Choose(x, s.serves)]
}

// serves reports whether split i's upstream has an eligible backend now.
func (s *routeSplit) serves(i int) bool {
	for _, b := range s.ups[i].Current().Backends {
		if b.Eligible() {
			return true
		}
	}
	return false
}

// splitUpstream is the upstream the request goes to: the split chosen on
// a route with splits, else up (the route's own).
func (rec *recorder) splitUpstream(r *http.Request, up *upstream.Upstream) *upstream.Upstream {
	if rec.edge == nil || rec.edge.split == nil {
		return up
	}
	return rec.edge.split.choose(r)
}
