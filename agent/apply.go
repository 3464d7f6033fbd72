package agent

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// applyLocked merges the latest Consul catalog into cfg (mergeCatalog),
// applies base plus the catalog upstreams to the gateway, then re-targets
// discovery at the merged configuration. For a catalog change (reload
// false) nothing is applied when the catalog upstreams did not change, and
// discovery is left as it is when their names and consul blocks did not
// (discoveryTargets). An error means the gateway rejected base: nothing
// changed. a.mu must be held.
func (a *Agent) applyLocked(cfg *hcl.Config, base gateway.Config, reload bool) error {
	merged, rep := a.merger.merge(cfg, a.disc.catalogState())
	synth := merged.Upstreams[len(cfg.Upstreams):]
	unchanged := sameUpstreams(synth, a.synth)
	if !reload && unchanged {
		a.publishCatalog(rep)
		return nil
	}
	gc := base
	gc.Upstreams = make([]gateway.UpstreamConfig, len(base.Upstreams), len(base.Upstreams)+len(synth))
	copy(gc.Upstreams, base.Upstreams)
	var err error
	if gc.Upstreams, err = a.appendSynth(gc.Upstreams, synth); err != nil {
		return err
	}
	synthGC := gc.Upstreams[len(base.Upstreams):]
	// Listeners a reload removes, re-addresses or turns a protocol off on
	// drain in the background for at most drain_timeout, as on SIGTERM.
	drain, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
	context.AfterFunc(drain, cancel)
	if err := a.gw.Apply(drain, gc); err != nil {
		if len(synth) == 0 {
			return err
		}
		// mergeCatalog validates everything it takes from Consul, so this
		// is a bug; still, Consul content must never take the configured
		// upstreams down with it.
		a.log.Error("the gateway rejected the catalog upstreams; applying the configuration without them", "error", err)
		if err := a.gw.Apply(drain, base); err != nil {
			return err
		}
		merged, synth, synthGC, rep = cfg, nil, nil, catalogReport{}
		unchanged = sameUpstreams(synth, a.synth)
	}
	if reload || !a.discTargets.same(cfg, synth) {
		a.discTargets = discoveryTargets{}
		if err := a.disc.apply(merged, !reload); err != nil {
			a.log.Error("discovery", "error", err)
		} else {
			a.discTargets = discoveryTargets{cfg: cfg, synth: synth}
		}
	}
	if !unchanged {
		added, removed := upstreamNamesDiff(a.synth, synth)
		a.log.Info("catalog upstreams applied", "upstreams", len(synth), "added", added, "removed", removed,
			"generation", a.gw.Generation())
	}
	a.synth, a.synthGC = synth, synthGC
	a.publishCatalog(rep)
	return nil
}

// appendSynth appends the catalog upstreams synth, converted for the
// gateway, to ucs. An upstream that a.synth holds too keeps its conversion
// (a.synthGC): both lists are in name order, so a catalog change converts
// only the upstreams it changed.
func (a *Agent) appendSynth(ucs []gateway.UpstreamConfig, synth []hcl.Upstream) ([]gateway.UpstreamConfig, error) {
	j := 0
	for _, u := range synth {
		for j < len(a.synth) && a.synth[j].Name < u.Name {
			j++
		}
		if j < len(a.synth) && j < len(a.synthGC) && sameUpstream(a.synth[j], u) {
			ucs = append(ucs, a.synthGC[j])
			continue
		}
		uc, err := upstreamConfig(u) // no TLS block: cannot fail
		if err != nil {
			return nil, err
		}
		ucs = append(ucs, uc)
	}
	return ucs, nil
}

// applyCatalog re-applies the running configuration with the latest
// catalog. The discovery applier calls it (coalesced, never from a watch).
func (a *Agent) applyCatalog() {
	if a.draining.Load() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.draining.Load() { // shutdown began while waiting for the lock
		return
	}
	if err := a.applyLocked(a.cfg, a.base, false); err != nil {
		a.log.Error("applying the Consul catalog; keeping the running configuration", "error", err)
	}
}

// publishCatalog makes rep visible to the control API and logs the
// conflicts and problems that are new since the previous report.
func (a *Agent) publishCatalog(rep catalogReport) {
	old := a.catalog.Load()
	known := make(map[conflictKey]bool, len(old.Conflicts))
	for _, o := range old.Conflicts {
		known[keyOfConflict(o)] = true
	}
	for _, c := range rep.Conflicts {
		if !known[keyOfConflict(c)] {
			a.log.Warn("route declared in Consul skipped: the same route is declared elsewhere",
				"host", c.Host, "path_prefix", c.PathPrefix, "served_by", c.WinnerSource, "skipped", c.LoserSource, "rule", c.Rule)
		}
	}
	for up, problems := range rep.Problems {
		for _, p := range problems {
			if !slices.Contains(old.Problems[up], p) {
				a.log.Warn("catalog: ignoring a tag or ServiceMeta value", "upstream", up, "problem", p)
			}
		}
	}
	a.catalog.Store(&rep)
}

// conflictKey is a routeConflict as a map key: equal exactly when
// reflect.DeepEqual finds the conflicts equal (nil and empty Methods
// differ; methods are tokens, without NUL). Looking each conflict up among
// the previous report's was quadratic in the conflicts.
type conflictKey struct {
	host, path, methods                            string
	nMethods                                       int
	nilMethods                                     bool
	winner, winnerSource, loser, loserSource, rule string
}

func keyOfConflict(c routeConflict) conflictKey {
	return conflictKey{host: c.Host, path: c.PathPrefix, methods: strings.Join(c.Methods, "\x00"), nMethods: len(c.Methods), nilMethods: c.Methods == nil,
		winner: c.Winner, winnerSource: c.WinnerSource, loser: c.Loser, loserSource: c.LoserSource, rule: c.Rule}
}

// sameUpstreams reports whether a and b hold equal upstreams, in the same
// order.
func sameUpstreams(a, b []hcl.Upstream) bool {
	return slices.EqualFunc(a, b, sameUpstream)
}

// sameUpstream is reflect.DeepEqual(x, y), at once for two copies of one
// catalog upstream: the catalog merge gives every upstream it makes a consul
// block of its own and never changes an upstream once made (catalogMerger),
// so one consul block means one upstream. Comparing thousands of catalog
// upstreams field by field took a fifth of a catalog change.
func sameUpstream(x, y hcl.Upstream) bool {
	if x.Consul != nil && x.Consul == y.Consul && x.Name == y.Name {
		return true
	}
	return reflect.DeepEqual(x, y)
}

// discoveryTargets is what the last successful discovery apply of a.mu's
// applyLocked was given: the configuration and its catalog upstreams.
// Discovery reads of them only the upstreams' names and consul blocks, so
// a catalog change that changed neither (a route added or removed, a new
// load_balancing) leaves every watch as it is: the apply is skipped instead
// of visiting every watch again. The zero value matches nothing.
type discoveryTargets struct {
	cfg   *hcl.Config
	synth []hcl.Upstream
}

// same reports whether discovery, given cfg merged with synth, would find
// nothing to do after t.
func (t discoveryTargets) same(cfg *hcl.Config, synth []hcl.Upstream) bool {
	return t.cfg != nil && t.cfg == cfg && slices.EqualFunc(t.synth, synth, func(x, y hcl.Upstream) bool {
		return x.Name == y.Name && (x.Consul == y.Consul || (x.Consul != nil && y.Consul != nil && reflect.DeepEqual(*x.Consul, *y.Consul)))
	})
}

// logNamesMax bounds the names a log line lists: with thousands of catalog
// services, one line per change must stay short.
const logNamesMax = 20

// upstreamNamesDiff returns the names of the upstreams in now but not in
// old, and in old but not in now, each cut to logNamesMax with a count of
// the rest.
func upstreamNamesDiff(old, now []hcl.Upstream) (added, removed []string) {
	had := make(map[string]bool, len(old))
	for _, u := range old {
		had[u.Name] = true
	}
	has := make(map[string]bool, len(now))
	for _, u := range now {
		has[u.Name] = true
		if !had[u.Name] {
			added = append(added, u.Name)
		}
	}
	for _, u := range old {
		if !has[u.Name] {
			removed = append(removed, u.Name)
		}
	}
	return capNames(added), capNames(removed)
}

func capNames(names []string) []string {
	if len(names) <= logNamesMax {
		return names
	}
	return append(names[:logNamesMax:logNamesMax], fmt.Sprintf("(%d more)", len(names)-logNamesMax))
}
