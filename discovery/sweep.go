package discovery

import (
	"context"
	"time"

	"github.com/hashicorp/consul/api"
)

// A sweep costs one request per node (and one for the node list). Sweeps are
// spaced by what the last one cost, so a burst of registration changes costs
// Consul at most sweepRate requests a second on average however many nodes the
// datacenter has, and at least sweepMinSpacing passes between two starts: one
// node's sweep waits 100 ms, 100 nodes' 0.5 s, 2,000 nodes' 10 s.
const (
	sweepRate       = 200 // requests per second
	sweepMinSpacing = 100 * time.Millisecond
)

// sweepSpacing is the least time after the start of a sweep of requests
// requests before the next may start.
func sweepSpacing(requests int) time.Duration {
	return max(sweepMinSpacing, time.Duration(requests)*time.Second/sweepRate)
}

// sweepAttempts bounds the tries of one sweep; a sweep that still fails is
// left to the next move, the feed's recovery or the periodic sweep.
const sweepAttempts = 3

// sweepInstance is one service instance as a sweep saw it.
type sweepInstance struct {
	node, id string
	tags     []string
	modify   uint64
}

// sweep reads every node's service instances (/v1/catalog/nodes, then
// /v1/catalog/node-services/<node> per node, through the Client's read
// slots) and moves every watched service that changed since its watch's
// last read: an instance whose ModifyIndex is above the read's
// X-Consul-Index, an instance on a node modified since, or an instance the
// watch knows that is gone. It finds the registration changes that leave no
// trace in the checks feed.
func (f *feed) sweep(ctx context.Context, why string) {
	f.sweepMu.Lock()
	defer f.sweepMu.Unlock()
	// A burst of registration changes gets one sweep per spacing, each
	// covering every change before it.
	if d := sweepSpacing(f.sweepCost) - time.Since(f.sweepStart); d > 0 && !sleep(ctx, d) {
		return
	}
	start := time.Now()
	f.sweepStart = start
	var err error
	for attempt := 1; attempt <= sweepAttempts; attempt++ {
		if err = f.sweepOnce(ctx); err == nil || ctx.Err() != nil {
			break
		}
		if !sleep(ctx, backoff{min: f.c.cfg.MinBackoff, max: f.c.cfg.MaxBackoff}.delay(attempt)) {
			return
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			f.log.Warn("consul change feed sweep failed; the next move or the periodic sweep tries again", "why", why, "error", err)
			f.c.metrics.queryError("feed:sweep", classifyAny(err).reason)
		}
		return
	}
	f.lastSweep = time.Now()
	f.log.Debug("consul change feed sweep done", "why", why, "took", time.Since(start))
}

func classifyAny(err error) *queryError {
	if qe, ok := err.(*queryError); ok {
		return qe
	}
	return classify("sweep", err)
}

func (f *feed) sweepOnce(ctx context.Context) error {
	var nodes []*api.Node
	err := f.c.read(ctx, func(ctx context.Context, a *api.Client) (err error) {
		nodes, _, err = a.Catalog().Nodes(f.opts(ctx, 0, 0))
		if err != nil {
			return classify("/v1/catalog/nodes", unwrapURL(err))
		}
		return nil
	})
	if err != nil {
		return err
	}
	byService := map[string][]sweepInstance{}
	nodeModify := map[string]uint64{}
	f.sweepCost = 1 + len(nodes)
	for _, n := range nodes {
		if n == nil {
			continue
		}
		nodeModify[n.Node] = n.ModifyIndex
		var list *api.CatalogNodeServiceList
		err := f.c.read(ctx, func(ctx context.Context, a *api.Client) (err error) {
			list, _, err = a.Catalog().NodeServiceList(n.Node, f.opts(ctx, 0, 0))
			if err != nil {
				return classify("/v1/catalog/node-services/"+n.Node, unwrapURL(err))
			}
			return nil
		})
		if err != nil {
			return err
		}
		if list == nil {
			continue // the node left between the two reads
		}
		for _, s := range list.Services {
			if s != nil {
				byService[s.Service] = append(byService[s.Service], sweepInstance{n.Node, s.ID, s.Tags, s.ModifyIndex})
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for service, subs := range f.subs {
		for s := range subs {
			if s.sweepMoved(byService[service], nodeModify) {
				s.signal(0)
			}
		}
	}
	return nil
}

// sweepMoved reports whether what a sweep saw of the service differs from
// the subscription's last read: an instance it does not know (with its
// tags), one modified since, one on a node modified since, or one it knows
// that is gone.
func (s *feedSub) sweepMoved(seen []sweepInstance, nodeModify map[string]uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.index == 0 {
		return false // its first read is still to come
	}
	found := map[string]map[string]bool{}
	for _, in := range seen {
		if !hasAllTags(in.tags, s.tags) {
			continue
		}
		if in.modify > s.index || !s.ids[in.node][in.id] {
			return true
		}
		if found[in.node] == nil {
			found[in.node] = map[string]bool{}
		}
		found[in.node][in.id] = true
	}
	for node, ids := range s.ids {
		if nodeModify[node] > s.index {
			return true
		}
		for id := range ids {
			if !found[node][id] {
				return true
			}
		}
	}
	return false
}

// read runs one non-watch request in one of the Client's maxReads slots,
// with a deadline, so re-reads and sweeps never hold more connections.
func (c *Client) read(ctx context.Context, do func(ctx context.Context, a *api.Client) error) error {
	select {
	case c.reads <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.reads }()
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	return do(ctx, c.readAPI)
}

// readTimeout bounds one re-read or sweep request: a Consul that hangs must
// not hold a read slot for a whole blocking wait.
const readTimeout = 30 * time.Second
