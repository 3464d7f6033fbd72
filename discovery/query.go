package discovery

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"time"

	"github.com/hashicorp/consul/api"
)

// Health policies accepted in Query.Health.
const (
	// HealthPassing admits an instance only when every one of its checks —
	// service checks and node checks — is passing. Maintenance mode (node or
	// service) counts as critical.
	HealthPassing = "passing"
	// HealthWarning admits instances whose worst check is passing or warning.
	HealthWarning = "warning"
)

// Query names the instances to watch: the healthy instances of one service.
type Query struct {
	// Service is the Consul service name. Required.
	Service string
	// Tags, when set, admit only instances carrying every one of them.
	Tags []string
	// Health is HealthPassing (default when empty) or HealthWarning.
	Health string
	// Datacenter overrides Config.Datacenter; empty uses it (or the agent's).
	Datacenter string
	// Namespace and Partition are Consul Enterprise scopes; empty uses the
	// token's default. Consul CE answers 400 Bad Request when they are set.
	Namespace string
	Partition string
	// Connect reads /v1/health/connect/<Service> instead of
	// /v1/health/service/<Service>: the instances that accept Connect
	// (mTLS) traffic for the service — its connect-proxy sidecars and its
	// Connect-native instances. An instance's Address and Port are then the
	// sidecar's own (its service address, falling back to its node's),
	// never the application's behind it; its ServiceID is the sidecar's.
	// Tags and health apply to the sidecar's registration and checks.
	//
	// A Connect query holds its own blocking query even under
	// Config.ChangeFeed: the feed follows services by name, and a
	// sidecar's name ("db-sidecar-proxy" by convention, any name in
	// general) is not the query's.
	Connect bool
}

// normalize returns q with defaults applied, or an error for an invalid query.
func (q Query) normalize() (Query, error) {
	if q.Service == "" {
		return q, errors.New("discovery: query: service name is empty")
	}
	switch q.Health {
	case "":
		q.Health = HealthPassing
	case HealthPassing, HealthWarning:
	default:
		return q, fmt.Errorf("discovery: query %s: health %q: must be %q or %q", q.Service, q.Health, HealthPassing, HealthWarning)
	}
	return q, nil
}

// Key returns a canonical string identifying q: equal for queries that select
// the same instances (tag order and duplicates and an empty Health versus
// "passing" do not matter). Suitable as a map key and for logs.
func (q Query) Key() string {
	if len(q.Tags) == 0 && q.Datacenter == "" && q.Namespace == "" && q.Partition == "" && !q.Connect {
		// The common query, as url.Values would encode it without building
		// them: status and readiness key thousands of watches a second.
		switch q.Health {
		case "", HealthPassing:
			return url.PathEscape(q.Service) + "?health=" + HealthPassing
		case HealthWarning:
			return url.PathEscape(q.Service) + "?health=" + HealthWarning
		}
	}
	v := url.Values{}
	if q.Health == "" {
		v.Set("health", HealthPassing)
	} else {
		v.Set("health", q.Health)
	}
	tags := slices.Clone(q.Tags)
	slices.Sort(tags)
	for _, t := range slices.Compact(tags) {
		v.Add("tag", t)
	}
	if q.Connect {
		v.Set("connect", "true")
	}
	for k, s := range map[string]string{"dc": q.Datacenter, "ns": q.Namespace, "partition": q.Partition} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return url.PathEscape(q.Service) + "?" + v.Encode()
}

// Instance is one usable service instance.
type Instance struct {
	// ID is Node + "/" + ServiceID: the stable identity of the instance.
	ID        string
	Node      string
	ServiceID string
	// Address is the service address, falling back to the node address.
	Address string
	Port    int
	Tags    []string
	Meta    map[string]string
	// Weight is the Consul service weight: Weights.Passing, or Weights.Warning
	// when the instance's worst check is warning; 1 when Consul reports 0.
	Weight int
}

// equal reports whether a and b describe the same instance in every field.
func (a Instance) equal(b Instance) bool {
	return a.ID == b.ID && a.Node == b.Node && a.ServiceID == b.ServiceID &&
		a.Address == b.Address && a.Port == b.Port && a.Weight == b.Weight &&
		slices.Equal(a.Tags, b.Tags) && maps.Equal(a.Meta, b.Meta)
}

// Snapshot is the full set of usable instances of a query at one moment.
// Snapshots are shared: consumers must not modify them.
type Snapshot struct {
	Query Query
	// Instances is sorted by ID; empty when Consul reports no usable instance.
	Instances []Instance
	// Excluded are the instances Consul knows that the health policy
	// leaves out (failing checks, maintenance), sorted by ID: never
	// routed to, reported so that a backend that is down shows as down.
	Excluded []Excluded
	// Index is the X-Consul-Index of the reply that produced the snapshot.
	Index uint64
	// Time is when the snapshot was emitted.
	Time time.Time
}

// sameInstances reports whether two ID-sorted instance lists are identical.
func sameInstances(a, b []Instance) bool {
	return slices.EqualFunc(a, b, Instance.equal)
}

// instances converts health entries into the usable instances of q, sorted by
// ID. Entries failing the health policy or lacking a tag are dropped.
func instances(q Query, entries []*api.ServiceEntry) []Instance {
	return judge(q, compact(q, entries), nil).ins
}

// Excluded is an instance that fails the query's health policy.
type Excluded struct {
	Instance
	// Status is its aggregated check status: "critical", "warning" (under
	// the passing policy) or "maintenance".
	Status string
	// Checks names its checks that are not passing, as "name: status",
	// sorted. Check output is left out: it changes with every run of some
	// checks and would make every answer look new.
	Checks []string
}

func (a Excluded) equal(b Excluded) bool {
	return a.Instance.equal(b.Instance) && a.Status == b.Status && slices.Equal(a.Checks, b.Checks)
}

// excluded lists the instances of entries that carry q's tags but fail its
// health policy, sorted by ID: the complement of instances.
func excluded(q Query, entries []*api.ServiceEntry) []Excluded {
	return judge(q, compact(q, entries), nil).excl
}

// admits applies a health policy to an aggregated check status. An unknown
// status (AggregatedStatus returns "") is treated as critical.
func admits(policy, status string) bool {
	switch status {
	case api.HealthPassing:
		return true
	case api.HealthWarning:
		return policy == HealthWarning
	default:
		return false
	}
}

func hasAllTags(have, want []string) bool {
	for _, t := range want {
		if !slices.Contains(have, t) {
			return false
		}
	}
	return true
}
