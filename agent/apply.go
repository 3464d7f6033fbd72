package agent

import (
	"context"
	"reflect"
	"slices"

	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// applyLocked merges the latest Consul catalog into cfg (mergeCatalog),
// applies base plus the catalog upstreams to the gateway, then re-targets
// discovery at the merged configuration. For a catalog change (reload
// false) nothing is applied when the catalog upstreams did not change. An
// error means the gateway rejected base: nothing changed. a.mu must be held.
func (a *Agent) applyLocked(cfg *hcl.Config, base gateway.Config, reload bool) error {
	merged, rep := mergeCatalog(cfg, a.disc.catalogState())
	synth := merged.Upstreams[len(cfg.Upstreams):]
	if !reload && sameUpstreams(synth, a.synth) {
		a.publishCatalog(rep)
		return nil
	}
	gc := base
	gc.Upstreams = slices.Clone(base.Upstreams)
	for _, u := range synth {
		uc, err := upstreamConfig(u) // no TLS block: cannot fail
		if err != nil {
			return err
		}
		gc.Upstreams = append(gc.Upstreams, uc)
	}
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
		merged, synth, rep = cfg, nil, catalogReport{}
	}
	if err := a.disc.apply(merged, !reload); err != nil {
		a.log.Error("discovery", "error", err)
	}
	if !sameUpstreams(synth, a.synth) {
		var names []string
		for _, u := range synth {
			names = append(names, u.Name)
		}
		a.log.Info("catalog upstreams applied", "upstreams", names, "generation", a.gw.Generation())
	}
	a.synth = synth
	a.publishCatalog(rep)
	return nil
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
	for _, c := range rep.Conflicts {
		if !slices.ContainsFunc(old.Conflicts, func(o routeConflict) bool { return reflect.DeepEqual(o, c) }) {
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

func sameUpstreams(a, b []hcl.Upstream) bool {
	return slices.EqualFunc(a, b, func(x, y hcl.Upstream) bool { return reflect.DeepEqual(x, y) })
}
