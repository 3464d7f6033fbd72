package agent

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// The catalog mode (consul.catalog): Consul services that opt in through
// tags get an upstream "consul:<service>" and routes, without an upstream
// block. What is read where:
//
//   - tags, read from /v1/catalog/services (the union of the tags of all
//     instances of the service), with prefix P = consul.catalog.tag_prefix:
//     "P.route=HOST/PATH" (repeatable) declares a route and opts the service
//     in; "P.enable=true" opts it in without a route tag (for routes in
//     ServiceMeta), "P.enable=false" opts it out whatever else it carries;
//     "P.scheme=http|https|h2c" is how its instances are reached;
//     "P.lb=POLICY" its load_balancing policy.
//   - ServiceMeta, read per instance from the passing instances that the
//     upstream's own health watch reports (/v1/health/service/<service>):
//     "impulse-route" = comma-separated HOST/PATH routes (the union over the
//     instances), "impulse-lb" = POLICY (wins over the P.lb tag),
//     "impulse-scheme" = http|https|h2c for that instance (wins over the
//     P.scheme tag and default_scheme, as for every Consul-fed upstream).
//     The keys are fixed, whatever tag_prefix says.
//
// Route conflicts: a route is identified by (host, path_prefix, methods).
// A route declared in an upstream block always wins over the same route
// declared in Consul; between two Consul services the lexically smaller
// service name wins. The loser's route is skipped (its upstream stays) and
// /v1/routes lists the conflict on the winning route with both sources.
const (
	// Tag keys, after "<tag_prefix>.".
	TagRoute  = "route"
	TagEnable = "enable"
	TagScheme = "scheme"
	TagLB     = "lb"
	// MetaRoute and MetaLB are the ServiceMeta keys of the catalog mode
	// (MetaScheme is shared with every Consul-fed upstream).
	MetaRoute = "impulse-route"
	MetaLB    = "impulse-lb"

	// SourceHCL is the source of routes and upstreams from upstream blocks;
	// catalog ones have the source "consul:<service>", their upstream name.
	SourceHCL = "hcl"

	// Conflict rules reported in /v1/routes.
	RuleHCLWins         = "hcl_wins"
	RuleSmallerNameWins = "smaller_service_name_wins"
)

// catalogDefaultPolicy is the load_balancing of a catalog upstream that
// declares none.
const catalogDefaultPolicy = hcl.DefaultLoadBalancing

// catalogState is what mergeCatalog needs from Consul.
type catalogState struct {
	// Synced is false until the catalog watch answered once.
	Synced bool
	// Services maps every service with at least one prefixed tag to those
	// tags (discovery.CatalogSnapshot.Services).
	Services map[string][]string
	// Instances maps a service to the passing instances its upstream's
	// watch reported last; when that set became empty, the last non-empty
	// one (so ServiceMeta routes answer 503, not 404, while no instance
	// passes).
	Instances map[string][]discovery.Instance
}

// routeConflict is one route declared in Consul that was skipped because
// another source declares the same (host, path_prefix, methods).
type routeConflict struct {
	Host       string
	PathPrefix string
	Methods    []string
	// Winner serves the route; Loser's declaration was skipped.
	Winner, WinnerSource string
	Loser, LoserSource   string
	Rule                 string
}

// catalogReport is what a merge decided, for the control API and the logs.
type catalogReport struct {
	// Upstreams are the names of the upstreams made from Consul services.
	Upstreams map[string]bool
	Conflicts []routeConflict
	// Problems lists per catalog upstream the tags and ServiceMeta values
	// that were ignored, and why.
	Problems map[string][]string
}

// source returns the source of upstream name: its own name for catalog
// upstreams, SourceHCL otherwise.
func (r *catalogReport) source(name string) string {
	if r != nil && r.Upstreams[name] {
		return name
	}
	return SourceHCL
}

// routeKey identifies a route the way the gateway's route table does:
// duplicates of a key are rejected by route.Build, so they must never reach
// it. Hosts are already normalized (lower case, no brackets) by the hcl
// package; methods compare upper-cased and sorted.
type routeKey struct {
	host, path, methods string
}

func keyOf(r hcl.Route) routeKey {
	switch { // an exact or regex route (HCL only) never collides with a prefix
	case r.Path != "":
		r.PathPrefix = "=" + r.Path
	case r.PathRegex != "":
		r.PathPrefix = "~" + r.PathRegex
	}
	if len(r.Methods) == 0 { // every catalog route: no allocation for a lower-case host
		return routeKey{host: strings.ToLower(r.Host), path: r.PathPrefix}
	}
	m := make([]string, len(r.Methods))
	for i, x := range r.Methods {
		m[i] = strings.ToUpper(x)
	}
	slices.Sort(m)
	return routeKey{host: strings.ToLower(r.Host), path: r.PathPrefix, methods: strings.Join(slices.Compact(m), ",")}
}

// serviceDecl is what a service declares through its tags and its
// instances' ServiceMeta.
type serviceDecl struct {
	optedIn  bool
	routes   []hcl.Route
	scheme   string
	lb       string
	problems []string
}

// declaration reads the catalog keys of one service: tags (all carrying
// prefix + "."), the passing instances' ServiceMeta, and the defaults.
// Unusable values are reported in problems and ignored; they never fail.
func declaration(prefix, defaultScheme string, tags []string, instances []discovery.Instance) serviceDecl {
	d := serviceDecl{scheme: defaultScheme, lb: catalogDefaultPolicy}
	var enable *bool
	var schemes, lbs []string
	p := prefix + "."
	for _, tag := range tags {
		kv, ok := strings.CutPrefix(tag, p)
		if !ok {
			continue
		}
		key, val, hasVal := strings.Cut(kv, "=")
		switch {
		case !hasVal:
			d.problemf("tag %q: not KEY=VALUE; ignored", tag)
		case key == TagRoute:
			d.optedIn = true // even when the value is unusable: the intent is clear
			if r, err := hcl.ParseCatalogRoute(val); err != nil {
				d.problemf("tag %q: %v; route ignored", tag, err)
			} else {
				d.routes = append(d.routes, r)
			}
		case key == TagEnable:
			b, err := strconv.ParseBool(strings.TrimSpace(val))
			if err != nil {
				d.problemf("tag %q: not a boolean; ignored", tag)
				continue
			}
			if enable == nil || !b { // false wins over true
				enable = &b
			}
		case key == TagScheme:
			schemes = append(schemes, strings.TrimSpace(val))
		case key == TagLB:
			lbs = append(lbs, strings.TrimSpace(val))
		default:
			d.problemf("tag %q: unknown key %q (known: %s, %s, %s, %s); ignored", tag, key, TagRoute, TagEnable, TagScheme, TagLB)
		}
	}
	if enable != nil {
		d.optedIn = *enable
	}
	if !d.optedIn {
		return serviceDecl{}
	}
	if s, ok := d.pick("tag "+prefix+"."+TagScheme, schemes, validScheme); ok {
		d.scheme = s
	}
	if s, ok := d.pick("tag "+prefix+"."+TagLB, lbs, validCatalogPolicy); ok {
		d.lb = s
	}

	// ServiceMeta, instance by instance (sorted by ID by discovery).
	var metaLBs []string
	for _, in := range instances {
		if v, ok := in.Meta[MetaRoute]; ok {
			for _, part := range strings.Split(v, ",") {
				if r, err := hcl.ParseCatalogRoute(part); err != nil {
					d.problemf("instance %s: ServiceMeta %s %q: %v; route ignored", in.ID, MetaRoute, part, err)
				} else {
					d.routes = append(d.routes, r)
				}
			}
		}
		if v, ok := in.Meta[MetaLB]; ok {
			if why := validCatalogPolicy(strings.TrimSpace(v)); why != "" {
				d.problemf("instance %s: ServiceMeta %s %q: %s; ignored", in.ID, MetaLB, v, why)
			} else {
				metaLBs = append(metaLBs, strings.TrimSpace(v))
			}
		}
	}
	if len(metaLBs) > 0 {
		d.lb = metaLBs[0]
		if slices.ContainsFunc(metaLBs, func(s string) bool { return s != metaLBs[0] }) {
			d.problemf("ServiceMeta %s differs between instances; using %q (the instance with the smallest ID)", MetaLB, d.lb)
		}
	}

	// One route per key, sorted: the declaration order in Consul carries no
	// meaning.
	slices.SortFunc(d.routes, func(a, b hcl.Route) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.PathPrefix, b.PathPrefix))
	})
	d.routes = slices.CompactFunc(d.routes, func(a, b hcl.Route) bool { return keyOf(a) == keyOf(b) })
	return d
}

func (d *serviceDecl) problemf(format string, args ...any) {
	d.problems = append(d.problems, fmt.Sprintf(format, args...))
}

// pick returns the value of a tag that may appear once: the first valid
// one (tags are sorted), reporting invalid and disagreeing values.
func (d *serviceDecl) pick(what string, values []string, check func(string) string) (string, bool) {
	var valid []string
	for _, v := range values {
		if why := check(v); why != "" {
			d.problemf("%s=%s: %s; ignored", what, v, why)
			continue
		}
		valid = append(valid, v)
	}
	if len(valid) == 0 {
		return "", false
	}
	if slices.ContainsFunc(valid, func(s string) bool { return s != valid[0] }) {
		d.problemf("%s has several values %v; using %q", what, valid, valid[0])
	}
	return valid[0], true
}

func validScheme(s string) string {
	if s == "http" || s == "https" || s == "h2c" {
		return ""
	}
	return "must be http, https or h2c"
}

// validCatalogPolicy accepts the load_balancing policies that need no other
// setting: consistent_hash needs hash_on, which Consul cannot declare.
func validCatalogPolicy(s string) string {
	if s == "consistent_hash" {
		return "consistent_hash needs hash_on, which only an upstream block can set"
	}
	if !slices.Contains(hcl.LoadBalancingPolicies(), s) {
		return "must be one of " + strings.Join(slices.DeleteFunc(hcl.LoadBalancingPolicies(), func(p string) bool { return p == "consistent_hash" }), ", ")
	}
	return ""
}

// mergeCatalog returns cfg with one upstream "consul:<service>" added per
// service that opts in (in service name order), each fed by a consul block
// watching its passing instances, with the routes its tags and ServiceMeta
// declare minus those that lose a conflict, and the report of what was
// decided. It is pure: cfg is not modified. With the catalog mode off (or
// before the catalog answered) it returns cfg itself.
func mergeCatalog(cfg *hcl.Config, st catalogState) (*hcl.Config, catalogReport) {
	return new(catalogMerger).merge(cfg, st)
}

// catalogMerger is mergeCatalog with a memory of the previous merge, so
// that a change of one service among thousands re-reads that service only:
// a service whose tags and instances' catalog keys are unchanged keeps its
// declaration, and the upstream made from it stays the same value (its
// Consul block and routes the same pointers) when it keeps the same routes.
// Its results are mergeCatalog's. Every upstream it makes has a consul
// block of its own and is never changed once made: sameUpstream takes one
// consul block for one upstream. The zero value is ready; the agent keeps
// one under a.mu (it is not safe for concurrent use).
type catalogMerger struct {
	services map[string]*mergedService
	// names are the services of the previous merge, sorted.
	names []string
}

// mergedService is what the previous merge read of one service and made
// of it.
type mergedService struct {
	name           string // of its upstream
	prefix, scheme string
	tags           []string
	instances      []discovery.Instance
	decl           serviceDecl
	keys           []routeKey // keyOf each of decl.routes
	// made: upstream was made from decl, keeping the routes kept (indices
	// into decl.routes).
	made     bool
	kept     []int
	upstream hcl.Upstream
}

// declared returns the declaration of svc (see declaration), read again
// only when its inputs changed since the previous merge.
func (m *catalogMerger) declared(prefix, scheme, svc string, tags []string, instances []discovery.Instance) *mergedService {
	if ms := m.services[svc]; ms != nil && ms.prefix == prefix && ms.scheme == scheme &&
		slices.Equal(ms.tags, tags) && sameCatalogMeta(ms.instances, instances) {
		return ms
	}
	ms := &mergedService{name: hcl.CatalogUpstreamPrefix + svc, prefix: prefix, scheme: scheme, tags: tags, instances: instances,
		decl: declaration(prefix, scheme, tags, instances)}
	// Shared by later merges, which append their own problems: never in place.
	ms.decl.problems = slices.Clip(ms.decl.problems)
	for _, r := range ms.decl.routes {
		ms.keys = append(ms.keys, keyOf(r))
	}
	m.services[svc] = ms
	return ms
}

// sameCatalogMeta reports whether declaration reads the same of the
// instances a and b: the same IDs, in the same order, with the same
// catalog ServiceMeta keys.
func sameCatalogMeta(a, b []discovery.Instance) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	for i := range a {
		if a[i].ID != b[i].ID || !sameMetaKey(a[i].Meta, b[i].Meta, MetaRoute) || !sameMetaKey(a[i].Meta, b[i].Meta, MetaLB) {
			return false
		}
	}
	return true
}

func sameMetaKey(a, b map[string]string, key string) bool {
	va, oka := a[key]
	vb, okb := b[key]
	return oka == okb && va == vb
}

// sortedNames returns the services of st sorted: the previous merge's list
// when the set is the same.
func (m *catalogMerger) sortedNames(services map[string][]string) []string {
	if len(m.names) == len(services) && !slices.ContainsFunc(m.names, func(n string) bool {
		_, ok := services[n]
		return !ok
	}) {
		return m.names
	}
	names := make([]string, 0, len(services))
	for name := range services {
		names = append(names, name)
	}
	slices.Sort(names)
	m.names = names
	return names
}

// merge is mergeCatalog (see there).
func (m *catalogMerger) merge(cfg *hcl.Config, st catalogState) (*hcl.Config, catalogReport) {
	rep := catalogReport{Upstreams: map[string]bool{}, Problems: map[string][]string{}}
	if !cfg.Consul.CatalogEnabled() || !st.Synced {
		return cfg, rep
	}
	if m.services == nil {
		m.services = map[string]*mergedService{}
	}
	for svc := range m.services {
		if _, ok := st.Services[svc]; !ok {
			delete(m.services, svc)
		}
	}
	cat := cfg.Consul.Catalog
	type claim struct{ upstream, source string }
	claimed := make(map[routeKey]claim, len(st.Services))
	for _, u := range cfg.Upstreams {
		for _, r := range u.Routes {
			if _, dup := claimed[keyOf(r)]; !dup {
				claimed[keyOf(r)] = claim{u.Name, SourceHCL}
			}
		}
	}
	names := m.sortedNames(st.Services)
	out := *cfg
	out.Upstreams = make([]hcl.Upstream, len(cfg.Upstreams), len(cfg.Upstreams)+len(names))
	copy(out.Upstreams, cfg.Upstreams)
	var kept []int
	for _, svc := range names {
		ms := m.declared(cat.TagPrefix, cat.DefaultScheme, svc, st.Services[svc], st.Instances[svc])
		d := ms.decl
		if !d.optedIn {
			continue
		}
		name := ms.name
		kept = kept[:0]
		for i, r := range d.routes {
			if why := hcl.UnreachablePrefix(r.PathPrefix, cfg.Paths); why != "" {
				d.problemf("route %s%s: %s; route ignored", r.Host, r.PathPrefix, why)
				continue
			}
			k := ms.keys[i]
			if c, ok := claimed[k]; ok {
				rule := RuleSmallerNameWins
				if c.source == SourceHCL {
					rule = RuleHCLWins
				}
				rep.Conflicts = append(rep.Conflicts, routeConflict{Host: r.Host, PathPrefix: r.PathPrefix, Methods: r.Methods,
					Winner: c.upstream, WinnerSource: c.source, Loser: name, LoserSource: name, Rule: rule})
				continue
			}
			claimed[k] = claim{name, name}
			kept = append(kept, i)
		}
		if !ms.made || !slices.Equal(kept, ms.kept) {
			u := hcl.Upstream{
				Name:          name,
				LoadBalancing: d.lb,
				Timeouts:      hcl.DefaultTimeouts(),
				Consul:        &hcl.UpstreamConsul{Service: svc, Health: hcl.DefaultHealth, Scheme: d.scheme},
			}
			for _, i := range kept {
				u.Routes = append(u.Routes, d.routes[i])
			}
			ms.made, ms.kept, ms.upstream = true, slices.Clone(kept), u
		}
		rep.Upstreams[name] = true
		if len(d.problems) > 0 {
			rep.Problems[name] = d.problems
		}
		out.Upstreams = append(out.Upstreams, ms.upstream)
	}
	return &out, rep
}
