package agent

// Readiness (/v1/ready): the gateway's own state, discovery sync and
// staleness, and draining.

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-metrics"

	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/gateway/auth"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// ready combines the gateway's readiness, discovery sync and draining;
// degraded lists discovery problems that do not stop traffic. Discovery that
// has not synced fails readiness only until the gateway was ready once: after
// that it is an upstream added by a reload, which answers 503
// discovery_pending meanwhile, and failing readiness for it would take every
// gateway of a fleet out of rotation when a reload meets a Consul outage.
func (a *Agent) ready() (ok bool, reasons, degraded []string) {
	var unsynced []string
	if a.draining.Load() {
		reasons = append(reasons, "draining")
	}
	if ok, r := a.gw.Ready(); !ok {
		// Catalog upstreams never make the gateway unready (see
		// discoverySet.readiness): drop their "not synced" reasons.
		rep := a.catalog.Load()
		for _, reason := range r {
			name, _, _ := strings.Cut(strings.TrimPrefix(reason, "upstream "), ": ")
			switch {
			case strings.HasPrefix(reason, "upstream ") && rep.Upstreams[name]:
			case strings.HasPrefix(reason, "upstream "):
				unsynced = append(unsynced, reason)
			default:
				reasons = append(reasons, reason)
			}
		}
	}
	a.mu.Lock()
	maxStale := time.Duration(0)
	if a.cfg.Consul != nil {
		maxStale = a.cfg.Consul.MaxStaleness
	}
	a.mu.Unlock()
	notReady, degraded := a.disc.readiness(maxStale)
	degraded = append(degraded, keySetReadiness(a.gw.KeySets())...)
	unsynced = append(unsynced, notReady...)
	if a.wasReady.Load() {
		degraded = append(degraded, unsynced...)
	} else {
		reasons = append(reasons, unsynced...)
	}
	// The mesh identity (mesh.go): without a leaf, roots or intentions,
	// or past the leaf's expiry, mesh listeners refuse every handshake.
	meshNot, meshDegraded := a.mesh.readiness(time.Now())
	reasons, degraded = append(reasons, meshNot...), append(degraded, meshDegraded...)
	ok = len(reasons) == 0
	if ok && !a.draining.Load() && a.wasReady.CompareAndSwap(false, true) {
		a.log.Info("ready: listeners serving and discovery synced")
	}
	return ok, reasons, degraded
}

// keySetReadiness lists the jwt key sets (jwks_url) that are degraded:
// none verifies and the last fetch failed (their routes answer 503
// auth_unavailable: never fetched, or stale), or one verifies through failed fetches (the last good
// set, or the set carried over a reload that changed the source). Never
// not-ready: the gateway's other routes serve, and failing every gateway
// of a fleet because a provider is down would turn its outage into a
// traffic outage.
func keySetReadiness(sets []auth.KeysState) (degraded []string) {
	for _, s := range sets {
		why := ""
		if s.LastErr != nil {
			why = " (last error: " + s.LastErr.Error() + ")"
		}
		staleAt := s.StaleAt.UTC().Format(time.RFC3339)
		switch {
		case !s.Usable && s.LastErr == nil:
			// Being fetched, or idle past its refresh: the next request
			// fetches it, nothing failed yet.
		case !s.Usable && s.StaleAt.IsZero():
			degraded = append(degraded, fmt.Sprintf("jwt key set %s: no key set yet, tokens are refused with 503 auth_unavailable%s", s.URL, why))
		case !s.Usable:
			degraded = append(degraded, fmt.Sprintf("jwt key set %s: stale since %s, tokens are refused with 503 auth_unavailable%s", s.URL, staleAt, why))
		case s.Carried:
			degraded = append(degraded, fmt.Sprintf("jwt key set %s: verifying with the previous source's set until a fetch succeeds, stale at %s%s", s.URL, staleAt, why))
		case s.LastErr != nil:
			degraded = append(degraded, fmt.Sprintf("jwt key set %s: verifying with the last good set, stale at %s%s", s.URL, staleAt, why))
		}
	}
	return degraded
}

// readiness lists watches that have not synced once (not ready) and
// watches that are degraded: denied by ACLs, or without a successful query
// for longer than maxStale. Degraded discovery keeps serving the last known
// instances, so it does not fail readiness: failing every gateway at once
// while Consul is down would turn a Consul outage into a traffic outage.
func (d *discoverySet) readiness(maxStale time.Duration) (notReady, degraded []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.client == nil {
		return nil, nil
	}
	byKey := map[string]discovery.WatchStatus{}
	var catalogSt discovery.WatchStatus
	for _, st := range d.client.Status() {
		if st.Connect != nil {
			continue // the mesh's watches report their own readiness
		}
		if st.Catalog != nil {
			catalogSt = st
			continue
		}
		byKey[st.Query.Key()] = st
	}
	// Watches that a change feed's failure makes degraded are one line, not
	// one per service: the feed is what failed.
	var feedStale []string
	feedSince, feedErr, feedACL := time.Time{}, "", false
	check := func(name string, st discovery.WatchStatus, since time.Time, synced, catalogOnly bool, what string) {
		if !st.LastSuccess.IsZero() {
			since = st.LastSuccess
		}
		aclDenied := st.LastErrorReason == "acl_filtered" || st.LastErrorReason == "http_403"
		if synced && st.FeedError && (aclDenied || maxStale > 0 && time.Since(since) > maxStale) {
			feedStale = append(feedStale, strings.TrimPrefix(name, "consul service "))
			feedACL = feedACL || aclDenied
			if feedSince.IsZero() || since.Before(feedSince) {
				feedSince, feedErr = since, st.LastError
			}
			return
		}
		switch {
		case !synced && catalogOnly:
			// A service found in the catalog never makes the gateway
			// unready: one service's ACLs or errors must not take every
			// route out of rotation. Its upstream answers 503
			// discovery_pending meanwhile.
			if st.LastError != "" {
				degraded = append(degraded, name+": not synced yet (last error: "+st.LastError+")")
			}
		case !synced:
			msg := name + ": not synced yet"
			if st.LastError != "" {
				msg += " (last error: " + st.LastError + ")"
			}
			notReady = append(notReady, msg)
		case aclDenied:
			degraded = append(degraded, name+": ACL denied, serving the last known "+what+" ("+st.LastError+")")
		case maxStale > 0 && time.Since(since) > maxStale:
			degraded = append(degraded, fmt.Sprintf("%s: no successful query for %s, serving the last known %s (last error: %s)",
				name, time.Since(since).Round(time.Second), what, st.LastError))
		}
	}
	if d.catalog != nil {
		d.catalog.mu.Lock()
		applied := d.catalog.applied
		d.catalog.mu.Unlock()
		check("consul catalog", catalogSt, d.catalog.since, applied, false, "services")
	}
	for _, w := range d.watches {
		w.mu.Lock()
		synced := w.applied
		catalogOnly := d.catalog != nil && len(w.subs) > 0
		for up := range w.subs {
			catalogOnly = catalogOnly && strings.HasPrefix(up, hcl.CatalogUpstreamPrefix)
		}
		w.mu.Unlock()
		check("consul service "+w.q.Service, byKey[w.q.Key()], w.since, synced, catalogOnly, "instances")
	}
	if len(feedStale) > 0 {
		slices.Sort(feedStale)
		names := strings.Join(feedStale[:min(len(feedStale), 5)], ", ")
		if len(feedStale) > 5 {
			names += fmt.Sprintf(" and %d more", len(feedStale)-5)
		}
		why := fmt.Sprintf("no successful query for %s", time.Since(feedSince).Round(time.Second))
		if feedACL {
			why = "ACL denied"
		}
		degraded = append(degraded, fmt.Sprintf("consul change feed: %s, serving the last known instances of %d services (%s) (last error: %s)",
			why, len(feedStale), names, feedErr))
	}
	sort.Strings(notReady)
	sort.Strings(degraded)
	return notReady, degraded
}

// sampleStaleness sets the per-service last-success age gauge; called
// every second, it samples every gateway.SampleEvery(services) calls.
func (d *discoverySet) sampleStaleness() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.client == nil || d.metrics == nil {
		return
	}
	if d.staleTick++; d.staleTick < gateway.SampleEvery(d.staleN) {
		return
	}
	d.staleTick = 0
	statuses := d.client.Status()
	d.staleN = len(statuses)
	for _, st := range statuses {
		if st.Synced && st.Connect == nil {
			label := st.Query.Service
			if st.Catalog != nil {
				label = discovery.CatalogEndpoint
			}
			d.metrics.SetGaugeWithLabels(metricStaleness, float32(time.Since(st.LastSuccess).Seconds()),
				[]metrics.Label{{Name: "service", Value: label}})
		}
	}
}

// stop ends every watch and the applier.
