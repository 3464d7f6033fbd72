package agent

// GET /v1/status (and /ui/status.json, the status page's data): one
// document with everything the status page shows, read in one request.

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// statusDoc is the body of GET /v1/status.
type statusDoc struct {
	Time       time.Time              `json:"time"`
	Generation uint64                 `json:"generation"`
	Ready      readyDoc               `json:"ready"`
	Listeners  []gateway.ListenerInfo `json:"listeners"`
	// Routes are in match order, as /v1/routes.
	Routes    []routeEntry     `json:"routes"`
	Upstreams []statusUpstream `json:"upstreams"`
	// Backends are /v1/backends plus, for Consul-fed upstreams, the
	// instances Consul reports failing (membership "suppressed", health
	// "unhealthy"): a backend that is down shows as down instead of
	// vanishing. Sorted by upstream and id.
	Backends []statusBackend `json:"backends"`
	Watches  []watchDoc      `json:"watches"`
	Traffic  trafficDoc      `json:"traffic"`
	// Connect is the mesh identity (mesh.go); absent without a connect
	// block.
	Connect *connectDoc `json:"connect,omitempty"`
}

// readyDoc is /v1/ready's answer with the token.
type readyDoc struct {
	Ready    bool     `json:"ready"`
	Status   string   `json:"status"` // ok | degraded | not_ready
	Reasons  []string `json:"reasons"`
	Degraded []string `json:"degraded"`
}

// statusUpstream is /v1/upstreams' entry with its backends' health.
type statusUpstream struct {
	upstreamEntry
	// BackendsUp counts the backends whose status is "up"; BackendsTotal
	// the backends that are members (draining ones are not).
	BackendsUp    int `json:"backends_up"`
	BackendsTotal int `json:"backends_total"`
}

// statusBackend is one backend row: /v1/backends' entry and its status.
type statusBackend struct {
	gateway.BackendInfo
	// Status is what the row shows: "up" (receives traffic), "down"
	// (failing checks: the gateway's or Consul's, or no usable address),
	// "ejected" (outlier detection), "draining" (left the upstream,
	// finishing requests) or "suppressed" (withheld: unusable address).
	Status       string `json:"status"`
	StatusReason string `json:"status_reason,omitempty"`
}

// watchDoc is one Consul watch.
type watchDoc struct {
	Kind string `json:"kind"` // service | catalog | feed
	// Service and Query name a service watch (Query as its canonical key).
	Service string `json:"service,omitempty"`
	Query   string `json:"query"`
	// Upstreams are the upstreams the watch feeds.
	Upstreams []string `json:"upstreams"`
	Synced    bool     `json:"synced"`
	// LastSuccess is the last successful query; StalenessSeconds the time
	// since then (since the watch started before any), Stale true past
	// consul.max_staleness.
	LastSuccess      *time.Time `json:"last_success,omitempty"`
	StalenessSeconds float64    `json:"staleness_seconds"`
	Stale            bool       `json:"stale"`
	LastError        string     `json:"last_error,omitempty"`
	LastErrorReason  string     `json:"last_error_reason,omitempty"`
	LastIndex        uint64     `json:"last_index"`
	// Instances is the size of the last usable set (services for the
	// catalog, for a feed the services that follow it); NotPassing the
	// instances its health policy left out.
	Instances  int `json:"instances"`
	NotPassing int `json:"not_passing"`
	// Readiness are the /v1/ready reasons and degradations naming it.
	Readiness []string `json:"readiness"`
}

func (a *Agent) handleStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.status(time.Now()))
}

// status builds the document at now.
func (a *Agent) status(now time.Time) statusDoc {
	ok, reasons, degraded := a.ready()
	st := "ok"
	switch {
	case !ok:
		st = "not_ready"
	case len(degraded) > 0:
		st = "degraded"
	}
	rep := a.catalog.Load()
	a.mu.Lock()
	gen, maxStale := a.gen, time.Duration(0)
	if a.cfg.Consul != nil {
		maxStale = a.cfg.Consul.MaxStaleness
	}
	a.mu.Unlock()
	doc := statusDoc{Time: now, Generation: gen,
		Ready:     readyDoc{Ready: ok, Status: st, Reasons: nonNilSlice(reasons), Degraded: nonNilSlice(degraded)},
		Listeners: a.gw.Listeners(), Routes: routeEntries(a.gw.Routes(), rep), Traffic: a.traffic.doc(now)}
	watches, down := a.disc.report(now, maxStale, append(slices.Clone(reasons), degraded...))
	doc.Watches = nonNilSlice(watches)
	doc.Connect = a.mesh.report()
	doc.Backends = mergeBackends(a.gw.Backends(), down)
	up, total := map[string]int{}, map[string]int{}
	for _, b := range doc.Backends {
		if b.Status == "up" {
			up[b.Upstream]++
		}
		if b.Status != "draining" {
			total[b.Upstream]++
		}
	}
	for _, e := range upstreamEntries(a.gw.Upstreams(), rep) {
		doc.Upstreams = append(doc.Upstreams, statusUpstream{upstreamEntry: e, BackendsUp: up[e.Name], BackendsTotal: total[e.Name]})
	}
	doc.Upstreams = nonNilSlice(doc.Upstreams)
	return doc
}

// mergeBackends adds the Consul-excluded rows to the gateway's backends:
// a row the gateway still has (draining its last requests) takes the
// Consul health; the others are added. Each row gets its status.
func mergeBackends(bs []gateway.BackendInfo, down []gateway.BackendInfo) []statusBackend {
	type key struct{ up, id string }
	extra := map[key]gateway.BackendInfo{}
	for _, d := range down {
		extra[key{d.Upstream, d.ID}] = d
	}
	for i, b := range bs {
		if d, ok := extra[key{b.Upstream, b.ID}]; ok {
			bs[i].Health, bs[i].HealthReason = d.Health, d.HealthReason
			delete(extra, key{b.Upstream, b.ID})
		}
	}
	for _, d := range down {
		if _, ok := extra[key{d.Upstream, d.ID}]; ok {
			bs = append(bs, d)
		}
	}
	slices.SortStableFunc(bs, func(a, b gateway.BackendInfo) int {
		if c := strings.Compare(a.Upstream, b.Upstream); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	out := make([]statusBackend, 0, len(bs))
	for _, b := range bs {
		s, why := backendStatus(b)
		out = append(out, statusBackend{BackendInfo: b, Status: s, StatusReason: why})
	}
	return out
}

// backendStatus is a row's status: health, not configuration (a member
// that gets no traffic never shows "up").
func backendStatus(b gateway.BackendInfo) (status, reason string) {
	switch {
	case b.Membership == "removed":
		return "draining", "left the upstream; finishing its requests in flight"
	case b.Health == "unhealthy":
		return "down", b.HealthReason
	case b.Membership == "suppressed":
		return "suppressed", b.HealthReason
	case b.Ejected:
		return "ejected", "outlier detection: consecutive failures"
	case !b.Eligible && b.Resolution.LastError != "":
		return "down", "no usable address: " + b.Resolution.LastError
	case !b.Eligible && b.Health == "unknown":
		return "down", "not checked yet (health_check unknown_is_healthy = false)"
	case !b.Eligible:
		return "down", "not eligible"
	}
	return "up", ""
}

// report describes the watches at now and returns, as backend rows, the
// instances Consul reports failing for each upstream a watch feeds.
// readiness is every /v1/ready reason; each watch gets the ones naming it.
func (d *discoverySet) report(now time.Time, maxStale time.Duration, readiness []string) (docs []watchDoc, down []gateway.BackendInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.client == nil {
		return nil, nil
	}
	byKey := map[string]discovery.WatchStatus{}
	var catalogSt *discovery.WatchStatus
	for _, st := range d.client.Status() {
		if st.Connect != nil {
			continue
		}
		if st.Catalog != nil {
			catalogSt = &st
			continue
		}
		byKey[st.Query.Key()] = st
	}
	doc := func(kind, name, query string, st discovery.WatchStatus, since time.Time, ups []string) watchDoc {
		w := watchDoc{Kind: kind, Query: query, Upstreams: nonNilSlice(ups), Synced: st.Synced,
			LastError: st.LastError, LastErrorReason: st.LastErrorReason, LastIndex: st.LastIndex, Instances: st.Instances,
			Readiness: []string{}}
		if !st.LastSuccess.IsZero() {
			since = st.LastSuccess
			w.LastSuccess = &st.LastSuccess
		}
		w.StalenessSeconds = now.Sub(since).Seconds()
		w.Stale = maxStale > 0 && now.Sub(since) > maxStale
		for _, r := range readiness {
			if strings.HasPrefix(r, name+":") {
				w.Readiness = append(w.Readiness, r)
			}
		}
		return w
	}
	if c := d.catalog; c != nil {
		var st discovery.WatchStatus
		if catalogSt != nil {
			st = *catalogSt
		}
		query := "tag_prefix=" + c.q.TagPrefix
		if c.q.Filter != "" {
			query += " filter=" + c.q.Filter
		}
		docs = append(docs, doc("catalog", "consul catalog", query, st, c.since, nil))
	}
	for _, f := range d.client.Feeds() {
		query := f.Endpoint
		for _, kv := range [][2]string{{"dc", f.Datacenter}, {"ns", f.Namespace}, {"partition", f.Partition}} {
			if kv[1] != "" {
				query += " " + kv[0] + "=" + kv[1]
			}
		}
		wd := doc("feed", "consul change feed", query, f.Status, now, nil)
		wd.Instances = f.Services // the services that follow it
		docs = append(docs, wd)
	}
	keys := make([]string, 0, len(d.watches))
	for k := range d.watches {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w := d.watches[k]
		w.mu.Lock()
		ups := make([]string, 0, len(w.subs))
		for up := range w.subs {
			ups = append(ups, up)
		}
		slices.Sort(ups)
		what := "consul service "
		if w.q.Connect {
			what = "consul connect service " // /v1/health/connect/<service>
		}
		wd := doc("service", what+w.q.Service, k, byKey[k], w.since, ups)
		wd.Service = w.q.Service
		if w.last != nil {
			wd.NotPassing = len(w.last.Excluded)
			for _, up := range ups {
				down = append(down, excludedRows(up, w.subs[up], w.last.Query, w.last.Excluded, w.downSince)...)
			}
		}
		w.mu.Unlock()
		docs = append(docs, wd)
	}
	return docs, down
}

// excludedRows are the backend rows of instances Consul reports failing,
// for upstream up whose discovered instances (of query q) use scheme.
func excludedRows(up, scheme string, q discovery.Query, xs []discovery.Excluded, since map[string]time.Time) []gateway.BackendInfo {
	var out []gateway.BackendInfo
	for _, x := range xs {
		sps, _ := specs(discovery.Snapshot{Query: q, Instances: []discovery.Instance{x.Instance}}, scheme)
		sp := sps[0]
		reason := "consul: " + x.Status
		if len(x.Checks) > 0 {
			reason += " (" + strings.Join(x.Checks, ", ") + ")"
		}
		b := gateway.BackendInfo{ID: x.ID, Upstream: up, Source: upstream.SourceDiscovery, Address: sp.Scheme + "://" + sp.Addr(),
			Protocol: protocolOfScheme(sp.Scheme), Health: "unhealthy", HealthReason: reason, Membership: "suppressed",
			Weight: max(sp.Weight, 1), Resolution: upstream.Resolution{Kind: "none", Addresses: nil}}
		b.ConfiguredWeight = b.Weight
		if t, ok := since[x.ID]; ok {
			b.LastChange = &t
		}
		out = append(out, b)
	}
	return out
}

// protocolOfScheme is BackendInfo.Protocol for a backend scheme.
func protocolOfScheme(scheme string) string {
	switch scheme {
	case "http":
		return "http/1.1"
	case "h2c":
		return "h2c"
	}
	return "h2"
}

// excludedSince carries over, for s's excluded instances, when each was
// first seen excluded (now: s.Time for new ones); the others are dropped.
func excludedSince(old map[string]time.Time, s discovery.Snapshot) map[string]time.Time {
	if len(s.Excluded) == 0 {
		return nil
	}
	m := make(map[string]time.Time, len(s.Excluded))
	for _, x := range s.Excluded {
		if t, ok := old[x.ID]; ok {
			m[x.ID] = t
		} else {
			m[x.ID] = s.Time
		}
	}
	return m
}
