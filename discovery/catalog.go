package discovery

import (
	"context"
	"errors"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// CatalogEndpoint is the Consul endpoint a catalog watch queries. It is also
// the "service" label of the catalog watch's metrics (no Consul service name
// contains a "/", so it cannot be mistaken for one).
const CatalogEndpoint = "/v1/catalog/services"

// CatalogQuery selects the services reported by [Client.WatchCatalog].
type CatalogQuery struct {
	// TagPrefix selects the tags of interest: a service is reported when at
	// least one of its tags starts with TagPrefix + "."; only those tags are
	// reported. Required; a trailing "." is ignored.
	TagPrefix string
	// Filter is a Consul filter expression sent as ?filter=, evaluated by
	// Consul over every service instance before the services are listed
	// (for example `ServiceMeta.team == "shop"` or `"edge" in ServiceTags`).
	// Empty: no filter. Consul rejects an invalid expression (status 400;
	// 500 up to Consul 1.14), which the watch reports and retries like any
	// failed query.
	Filter string
	// Datacenter overrides Config.Datacenter; empty uses it (or the agent's).
	Datacenter string
}

// normalize returns q with a canonical TagPrefix, or an error.
func (q CatalogQuery) normalize() (CatalogQuery, error) {
	q.TagPrefix = strings.TrimSuffix(q.TagPrefix, ".")
	if q.TagPrefix == "" {
		return q, errors.New("discovery: catalog query: tag prefix is empty")
	}
	return q, nil
}

// key identifies q in logs and for sorting.
func (q CatalogQuery) key() string {
	v := url.Values{}
	v.Set("tag_prefix", q.TagPrefix)
	if q.Filter != "" {
		v.Set("filter", q.Filter)
	}
	if q.Datacenter != "" {
		v.Set("dc", q.Datacenter)
	}
	return CatalogEndpoint + "?" + v.Encode()
}

// CatalogSnapshot is the set of services carrying a tag with the query's
// prefix at one moment. Snapshots are shared: consumers must not modify them.
type CatalogSnapshot struct {
	Query CatalogQuery
	// Services maps every reported service name to its tags that start with
	// TagPrefix + ".", sorted and without duplicates. Never nil.
	Services map[string][]string
	// Index is the X-Consul-Index of the reply that produced the snapshot.
	Index uint64
	// Time is when the snapshot was emitted.
	Time time.Time
}

// WatchCatalog runs a blocking-query loop on /v1/catalog/services (with
// ?filter= when q.Filter is set) until ctx is done, then returns ctx.Err().
// It returns another error only for an invalid query or a nil emit, before
// contacting Consul.
//
// It follows the same rules as [Client.Watch]: the same index rules, rate
// limit and backoff; emit receives the full set, first after the first
// successful query (even if empty), then only when the reported services or
// their prefixed tags changed (a change of any other tag, or of a service
// without a prefixed tag, emits nothing). Failed queries never emit: the last
// emitted set stays the truth. An empty answer that ACLs filtered is an
// error, as for service watches. emit is called from the calling goroutine,
// must be cheap and must not modify the snapshot.
//
// Right after an outage or an index reset, services missing from answers are
// kept for Config.ResyncGrace (a route that vanishes is a 404): see runWatch.
func (c *Client) WatchCatalog(ctx context.Context, q CatalogQuery, emit func(CatalogSnapshot)) error {
	return c.WatchCatalogFrom(ctx, q, nil, emit)
}

// WatchCatalogFrom is [Client.WatchCatalog] for a watch that takes over from
// another one, as [Client.WatchFrom]: last (nil: nothing) is what the old
// watch emitted last, and the first answer is a resync against it.
func (c *Client) WatchCatalogFrom(ctx context.Context, q CatalogQuery, last *CatalogSnapshot, emit func(CatalogSnapshot)) error {
	q, err := q.normalize()
	if err != nil {
		return err
	}
	if emit == nil {
		return errors.New("discovery: catalog watch: emit is nil")
	}
	qc := q
	w := &watchState{st: WatchStatus{Catalog: &qc}}
	defer c.track(w)()
	var seed *map[string][]string
	if last != nil {
		seed = &last.Services
	}
	return runWatch(ctx, c, w, watchSpec[map[string][]string]{
		seed:     seed,
		label:    CatalogEndpoint,
		endpoint: CatalogEndpoint,
		noun:     "services",
		log:      c.cfg.Logger.With("catalog", q.key()),
		fetch: func(ctx context.Context, index uint64, wait time.Duration) (map[string][]string, uint64, error) {
			return c.fetchCatalog(ctx, q, index, wait)
		},
		same: func(a, b map[string][]string) bool { return maps.EqualFunc(a, b, slices.Equal[[]string]) },
		size: func(m map[string][]string) int { return len(m) },
		// Services come back one registration at a time, and a partial
		// catalog cannot be told from a complete one: keep every service
		// that is missing for the whole grace.
		merge: func(base, result map[string][]string) (map[string][]string, bool) {
			var out map[string][]string
			for name, tags := range base {
				if _, ok := result[name]; !ok {
					if out == nil {
						out = maps.Clone(result)
					}
					out[name] = tags
				}
			}
			if out == nil {
				return result, false
			}
			return out, true
		},
		settles: func(map[string][]string) bool { return false },
		emit: func(m map[string][]string, index uint64, at time.Time) {
			emit(CatalogSnapshot{Query: q, Services: m, Index: index, Time: at})
		},
	})
}

// fetchCatalog performs one blocking query of the catalog services endpoint
// at index and returns the services with prefixed tags and the reply's
// X-Consul-Index. Errors are *queryError.
func (c *Client) fetchCatalog(ctx context.Context, q CatalogQuery, index uint64, wait time.Duration) (_ map[string][]string, _ uint64, err error) {
	opts := (&api.QueryOptions{
		Datacenter: q.Datacenter,
		AllowStale: c.cfg.Stale,
		WaitIndex:  index,
		WaitTime:   wait,
		Filter:     q.Filter,
	}).WithContext(ctx)
	start := time.Now()
	defer func() { c.metrics.queryDone(CatalogEndpoint, start, err) }()
	services, meta, err := c.api.Catalog().Services(opts)
	if err != nil {
		return nil, 0, classify(CatalogEndpoint, unwrapURL(err))
	}
	if meta.ResultsFilteredByACLs && len(services) == 0 {
		return nil, 0, classify(CatalogEndpoint, errACLFiltered)
	}
	return prefixedServices(services, q.TagPrefix), meta.LastIndex, nil
}

// prefixedServices keeps the services that carry at least one tag starting
// with prefix + ".", each with only those tags, sorted and deduplicated.
func prefixedServices(services map[string][]string, prefix string) map[string][]string {
	out := map[string][]string{}
	p := prefix + "."
	for name, tags := range services {
		var keep []string
		for _, t := range tags {
			if strings.HasPrefix(t, p) {
				keep = append(keep, t)
			}
		}
		if len(keep) == 0 {
			continue
		}
		slices.Sort(keep)
		out[name] = slices.Compact(keep)
	}
	return out
}
