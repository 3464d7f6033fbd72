package hcl

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

// loadBalancingPolicies are the accepted upstream.load_balancing values
// (interface.md); the gateway implements each (gateway/balance).
var loadBalancingPolicies = []string{"round_robin", "random", "least_request", "consistent_hash", "ewma"}

// buildUpstreams converts the upstream blocks; names are unique.
func buildUpstreams(top blk, raws []*rawUpstream) []Upstream {
	var out []Upstream
	names := map[string]hcl2.Range{}
	for _, r := range raws {
		b := top.child(fmt.Sprintf("upstream %q", r.Name), r.DefRange)
		u := buildUpstream(b, r) // checked even when a duplicate, to report everything at once
		if prev, dup := names[r.Name]; dup {
			b.blockErrorf("Duplicate upstream", "an upstream named %q is already defined at %s.", r.Name, posString(prev))
			continue
		}
		names[r.Name] = r.DefRange
		out = append(out, u)
	}
	checkDuplicateRoutes(top, out)
	checkSplitUpstreams(top, out, names) // splits.go
	return out
}

// checkDuplicateRoutes reports a route that another (or the same) upstream
// already declares with the same host, path_prefix and methods: the gateway's
// route table would refuse to start with it. Hosts compare as the router
// does: case-insensitive, without a trailing dot; methods in any order.
func checkDuplicateRoutes(top blk, ups []Upstream) {
	type decl struct {
		upstream string
		at       hcl2.Range
	}
	seen := map[string]decl{}
	for _, u := range ups {
		for _, rt := range u.Routes {
			methods := make([]string, len(rt.Methods))
			for i, m := range rt.Methods {
				methods[i] = strings.ToUpper(m)
			}
			slices.Sort(methods)
			methods = slices.Compact(methods)
			match, matchName := rt.PathPrefix, "path_prefix"
			switch {
			case rt.Path != "":
				match, matchName = rt.Path, "path"
			case rt.PathRegex != "":
				match, matchName = rt.PathRegex, "path_regex"
			}
			key := strings.TrimSuffix(strings.ToLower(rt.Host), ".") + "|" + matchName + "=" + match + "|" + strings.Join(methods, ",")
			if prev, dup := seen[key]; dup {
				what := fmt.Sprintf("host %q and %s %q", rt.Host, matchName, match)
				if len(methods) > 0 {
					what = fmt.Sprintf("host %q, %s %q and methods %s", rt.Host, matchName, match, strings.Join(methods, ", "))
				}
				b := top.child(fmt.Sprintf("upstream %q route", u.Name), rt.Range)
				b.blockErrorf("Duplicate route", "%s are already routed to upstream %q at %s; a request could not tell the two apart.",
					what, prev.upstream, posString(prev.at))
				continue
			}
			seen[key] = decl{u.Name, rt.Range}
		}
	}
}

func buildUpstream(b blk, r *rawUpstream) Upstream {
	u := Upstream{Name: r.Name, Range: r.DefRange, Timeouts: DefaultTimeouts()}

	lbBefore := b.errCount()
	u.LoadBalancing = b.oneOf(r.LoadBalancing, DefaultLoadBalancing, loadBalancingPolicies...)
	lbValid := b.errCount() == lbBefore
	hashOn, hashOK := b.strOK(r.HashOn, "")
	u.HashOn = hashOn
	switch {
	case hashOn != "" && u.LoadBalancing != "consistent_hash" && lbValid:
		b.errorf(r.HashOn, "", "Invalid hash_on", "hash_on is only used with load_balancing = \"consistent_hash\"; got load_balancing %q.", u.LoadBalancing)
	case hashOn != "":
		if why := checkHashOn(hashOn); why != "" {
			b.errorf(r.HashOn, "", "Invalid hash_on", "%s.", why)
		}
	case u.LoadBalancing == "consistent_hash" && (r.HashOn == nil || hashOK):
		b.errorf(r.HashOn, "hash_on", "Missing hash_on", "load_balancing = \"consistent_hash\" needs hash_on (header:NAME, cookie:NAME, query:NAME, path, authority or client_ip).")
	}

	u.SlowStart = b.duration(r.SlowStart, 0, 0, time.Hour)

	if len(r.Routes) == 0 {
		b.blockErrorf("Missing route", "an upstream needs at least one route block.")
	}
	var routeRH []ladderRung // the routes' response_header, at most the upstream's
	for _, rr := range r.Routes {
		// A route with an invalid value is reported once and dropped: kept
		// with its defaults it would collide with other routes and add a
		// false "Duplicate route" error.
		before := b.errCount()
		rb := b.child("route", rr.DefRange)
		rt := buildRoute(rb, rr)
		if rh := buildRoutePolicies(rb, rr, &rt); rh != nil { // route_policies.go
			routeRH = append(routeRH, *rh)
		}
		if b.errCount() == before {
			u.Routes = append(u.Routes, rt)
		}
	}
	buildUpstreamEdge(b, r, &u)    // edge.go: the routes' default compress and cors
	buildUpstreamHeaders(b, r, &u) // routing.go: the routes' default header rules

	names := map[string]hcl2.Range{}
	for _, rb := range r.Backends {
		bb := b.child(fmt.Sprintf("backend %q", rb.Name), rb.DefRange)
		be := buildBackend(bb, rb)
		if prev, dup := names[rb.Name]; dup {
			bb.blockErrorf("Duplicate backend", "a backend named %q is already defined in this upstream at %s.", rb.Name, posString(prev))
			continue
		}
		names[rb.Name] = rb.DefRange
		u.Backends = append(u.Backends, be)
	}

	if r.Consul != nil {
		u.Consul = buildUpstreamConsul(b.child("consul", r.Consul.DefRange), r.Consul)
		buildConnectUpstream(b, r, u.Consul) // connect_upstream.go
	}
	if len(r.Backends) == 0 && r.Consul == nil && !onlyRedirects(r) {
		b.blockErrorf("No backends", "an upstream needs backend blocks, a consul block, or both (unless every route is a redirect or split).")
	}

	if r.HealthCheck != nil {
		u.HealthCheck = buildHealthCheck(b.child("health_check", r.HealthCheck.DefRange), r.HealthCheck)
		checkGRPCBackends(b, r, &u) // healthcheck_grpc.go
	}
	if r.OutlierDetection != nil {
		u.OutlierDetection = buildOutlierDetection(b.child("outlier_detection", r.OutlierDetection.DefRange), r.OutlierDetection)
	}
	if r.TLS != nil {
		u.TLS = buildClientTLS(b, r.TLS)
	}
	var rungs []ladderRung
	u.Timeouts, rungs = buildTimeouts(b, r.Timeouts) // timeouts.go
	u.Limits = buildUpstreamLimits(b, r.Limits)
	u.RateLimit = buildRateLimit(b, r.RateLimit) // ratelimit.go
	u.Retry = buildRetry(b, r.Retry)             // retry.go
	u.Hedge = buildHedge(b, r.Hedge)
	if r.Retry != nil && r.Retry.PerTryTimeout != nil && u.Retry.PerTryTimeout > 0 {
		// A try that may outlast the whole exchange is the same mistake.
		rungs = append(rungs, ladderRung{b.child("retry", r.Retry.DefRange), r.Retry.PerTryTimeout, u.Retry.PerTryTimeout})
	}
	checkLadder(u.Timeouts.Request, rungs)
	checkRouteResponseHeader(u.Timeouts.ResponseHeader, routeRH) // route_policies.go
	return u
}

func buildRoute(b blk, r *rawRoute) Route {
	rt := Route{Range: r.DefRange}
	buildRouteAuth(b, r, &rt)   // auth.go
	buildRouteEdge(b, r, &rt)   // edge.go
	buildRouteRules(b, r, &rt)  // routing.go
	buildRouteSplits(b, r, &rt) // splits.go
	if host, ok := b.strOK(r.Host, ""); ok {
		norm, why := normalizeRouteHost(host)
		if why != "" {
			b.errorf(r.Host, "", "Invalid host", "%s.", why)
		}
		rt.Host = norm
	}
	rt.PathPrefix = DefaultPathPrefix
	pathOrRegex := buildPathMatch(b, r, &rt) // routing.go: path or path_regex instead of path_prefix
	if p, ok := b.strOK(r.PathPrefix, DefaultPathPrefix); ok && !pathOrRegex {
		if why := checkPathPrefix(p); why != "" {
			b.errorf(r.PathPrefix, "", "Invalid path_prefix", "%s.", why)
		} else {
			rt.PathPrefix = p
		}
	}
	rt.Methods = b.strList(r.Methods, func(m string) string {
		if !isToken(m) {
			return fmt.Sprintf("%q is not an HTTP method token", m)
		}
		return ""
	})
	rt.IPAllow, rt.IPDeny = b.cidrList(r.IPAllow), b.cidrList(r.IPDeny) // clientaddr.go
	rt.Upgrades = append([]string{}, DefaultUpgrades...)
	if r.Upgrades != nil {
		rt.Upgrades = []string{}
		for _, u := range b.strList(r.Upgrades, func(u string) string {
			if !isUpgradeToken(u) {
				return fmt.Sprintf("%q is not an upgrade protocol (a token, optionally \"/\" and a version token, as in \"websocket\")", u)
			}
			return ""
		}) {
			rt.Upgrades = append(rt.Upgrades, strings.ToLower(u))
			if name, _, versioned := strings.Cut(u, "/"); versioned && strings.EqualFold(name, "websocket") {
				// RFC 6455 §4.1: clients send "Upgrade: websocket", the version
				// goes in Sec-WebSocket-Version.
				b.add(hcl2.DiagWarning, b.subject(r.Upgrades), "Upgrade never sent",
					b.field(r.Upgrades.Name)+fmt.Sprintf(": %q matches no WebSocket client (they send \"Upgrade: websocket\", and the version in Sec-WebSocket-Version); use \"websocket\".", u))
			}
		}
	}
	return rt
}

// isUpgradeToken reports whether s is a protocol of an Upgrade field:
// token ["/" token] (RFC 9110 §7.8).
func isUpgradeToken(s string) bool {
	name, version, ok := strings.Cut(s, "/")
	return isToken(name) && (!ok || isToken(version))
}

// checkPathPrefix returns why p is not a valid path_prefix, or "". A prefix
// is matched against the request path as sent, so it must itself be a
// normalized absolute path: no empty or dot segments (RFC 3986 §5.2.4) and
// only well-formed percent-encoding.
func checkPathPrefix(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("must start with \"/\"; got %q", p)
	case strings.ContainsAny(p, "?#"):
		return fmt.Sprintf("must not contain a query or fragment; got %q", p)
	case strings.Contains(p, "//"):
		return fmt.Sprintf("must not contain an empty segment (\"//\"); got %q", p)
	case strings.Contains(p, "\\"):
		return fmt.Sprintf("must not contain a backslash; got %q", p)
	case strings.ContainsFunc(p, isControlOrSpace):
		return fmt.Sprintf("must not contain spaces or control characters; got %q", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if s, err := url.PathUnescape(seg); err == nil && (s == "." || s == "..") {
			return fmt.Sprintf("must not contain a %q segment; got %q", s, p)
		}
	}
	s, err := url.PathUnescape(p)
	if err != nil {
		return fmt.Sprintf("has an invalid percent-encoding; got %q", p)
	}
	if strings.ContainsFunc(s, func(c rune) bool { return c < ' ' || c == 0x7f }) { // "%20" is fine
		return fmt.Sprintf("must not contain an encoded control byte; got %q", p)
	}
	// Whatever else the route table refuses ("/a/..;/b", the Tomcat
	// trick): validate, reload and the catalog must agree with it.
	if err := pathnorm.CheckPrefix(p); err != nil {
		return fmt.Sprintf("cannot be routed safely (%v); got %q", err, p)
	}
	return ""
}

func isControlOrSpace(c rune) bool { return c <= ' ' || c == 0x7f }

func buildBackend(b blk, r *rawBackend) Backend {
	be := Backend{Name: r.Name, Range: r.DefRange}
	addr, ok := b.strOK(r.Address, "")
	switch {
	case r.Address == nil:
		b.errorf(nil, "address", "Missing backend address", "address is required, as in \"http://127.0.0.1:8080\".")
	case ok:
		be.Address = addr
		scheme, host, port, err := ParseBackendAddress(addr)
		if err != nil {
			b.errorf(r.Address, "", "Invalid backend address", "%s.", err.(*AddressError).Reason)
			break
		}
		be.Scheme, be.Host, be.Port = scheme, host, port
	}
	be.Weight, _ = b.integer(r.Weight, DefaultWeight, 1, MaxWeight)
	return be
}

func buildUpstreamConsul(b blk, r *rawUpstreamConsul) *UpstreamConsul {
	c := &UpstreamConsul{
		Tags:       b.strList(r.Tags, nil),
		Health:     b.oneOf(r.Health, DefaultHealth, "passing", "warning"),
		Datacenter: b.str(r.Datacenter, ""),
		Namespace:  b.str(r.Namespace, ""),
		Partition:  b.str(r.Partition, ""),
		Scheme:     b.oneOf(r.Scheme, DefaultDiscoveryScheme, "http", "https", "h2c"),
	}
	svc, ok := b.strOK(r.Service, "")
	switch {
	case r.Service == nil:
		b.blockErrorf("Missing Consul service", "service is required: the Consul service whose instances become backends.")
	case ok && svc == "":
		b.errorf(r.Service, "", "Missing Consul service", "must not be empty.")
	}
	c.Service = svc
	return c
}

func buildHealthCheck(b blk, r *rawHealthCheck) *HealthCheck {
	before := b.errCount()
	interval := b.duration(r.Interval, DefaultHealthCheckInterval, positive, 0)
	timeout := b.duration(r.Timeout, DefaultHealthCheckTimeout, positive, 0)
	durationsOK := b.errCount() == before
	h := &HealthCheck{
		Path:               DefaultHealthCheckPath,
		Interval:           interval,
		Timeout:            timeout,
		HealthyThreshold:   b.count(r.HealthyThreshold, DefaultHealthyThreshold),
		UnhealthyThreshold: b.count(r.UnhealthyThreshold, DefaultUnhealthyThreshold),
		UnknownIsHealthy:   b.boolean(r.UnknownIsHealthy, true),
	}
	if p, ok := b.strOK(r.Path, DefaultHealthCheckPath); ok {
		ref, err := url.ParseRequestURI(p)
		switch {
		case !strings.HasPrefix(p, "/"):
			b.errorf(r.Path, "", "Invalid path", "must start with \"/\"; got %q.", p)
		case err != nil || strings.ContainsAny(p, " #") || ref.Host != "":
			b.errorf(r.Path, "", "Invalid path", "must be a path with an optional query, such as \"/health\" or \"/status?full=1\"; got %q.", p)
		default:
			h.Path = p
		}
	}
	buildGRPCCheck(b, r, h) // healthcheck_grpc.go
	if h.Interval < h.Timeout && durationsOK {
		a := r.Interval
		if a == nil {
			a = r.Timeout
		}
		b.errorf(a, "interval", "Invalid interval", "interval (%s) must not be shorter than timeout (%s).", h.Interval, h.Timeout)
	}
	return h
}

func buildOutlierDetection(b blk, r *rawOutlierDetection) *OutlierDetection {
	o := &OutlierDetection{
		Enabled:             b.boolean(r.Enabled, true),
		ConsecutiveFailures: b.count(r.ConsecutiveFailures, DefaultConsecutiveFailures),
		BaseEjectionTime:    b.duration(r.BaseEjectionTime, DefaultBaseEjectionTime, positive, 0),
	}
	o.MaxEjectionPercent, _ = b.integer(r.MaxEjectionPercent, DefaultMaxEjectionPercent, 0, 100)
	return o
}
