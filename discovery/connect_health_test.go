package discovery

import (
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// TestWatchConnectInstances: a Connect query (Query.Connect) reads
// /v1/health/connect/db: db's sidecar (at the sidecar's address and port,
// not the application's) and a Connect-native db instance, never a plain db
// instance; the sidecar's own checks decide its health. Under the change
// feed the query holds its own blocking query (Query.Connect) and sees the
// same.
func TestWatchConnectInstances(t *testing.T) { bothModes(t, testWatchConnectInstances) }

func testWatchConnectInstances(t *testing.T, mode func(*Config)) {
	t.Parallel()
	a := consultest.Start(t)
	c := newTestClient(t, a.Addr(), mode)
	w := startWatch(t, c, Query{Service: "db", Connect: true})
	plain := startWatch(t, c, Query{Service: "db"})
	w.rec.waitIDs(t)

	a.Register(t, api.AgentServiceRegistration{ID: "db-app", Name: "db", Address: "127.0.0.1", Port: 5432,
		Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
			Address: "127.0.0.2", Port: 21000,
			Checks: api.AgentServiceChecks{{CheckID: "db-sidecar:ttl", TTL: "10m", Status: api.HealthPassing}},
		}}})
	a.Register(t, api.AgentServiceRegistration{ID: "db-native", Name: "db", Address: "127.0.0.3", Port: 9443,
		Connect: &api.AgentServiceConnect{Native: true}})
	s := w.rec.waitIDs(t, "db-app-sidecar-proxy", "db-native")
	if got := s.Instances[0]; got.Address != "127.0.0.2" || got.Port != 21000 || got.ServiceID != "db-app-sidecar-proxy" {
		t.Fatalf("sidecar instance %+v: want the sidecar's 127.0.0.2:21000", got)
	}
	if got := s.Instances[1]; got.Address != "127.0.0.3" || got.Port != 9443 {
		t.Fatalf("native instance %+v: want 127.0.0.3:9443", got)
	}
	if !s.Query.Connect || s.Query.Key() != "db?connect=true&health=passing" {
		t.Fatalf("snapshot query %+v (key %q)", s.Query, s.Query.Key())
	}
	// The plain query sees the application and the native instance.
	plain.rec.waitIDs(t, "db-app", "db-native")

	// The sidecar's check going critical takes it out of the Connect set.
	a.SetCheck(t, "db-sidecar:ttl", api.HealthCritical)
	s = w.rec.waitIDs(t, "db-native")
	if len(s.Excluded) != 1 || s.Excluded[0].ServiceID != "db-app-sidecar-proxy" {
		t.Fatalf("excluded %+v: want the sidecar", s.Excluded)
	}
	a.SetCheck(t, "db-sidecar:ttl", api.HealthPassing)
	w.rec.waitIDs(t, "db-app-sidecar-proxy", "db-native")
	a.Deregister(t, "db-native")
	w.rec.waitIDs(t, "db-app-sidecar-proxy")
}

// TestConnectQueryKey: a Connect query and a plain one of the same service
// are different watches.
func TestConnectQueryKey(t *testing.T) {
	if a, b := (Query{Service: "db"}).Key(), (Query{Service: "db", Connect: true}).Key(); a == b {
		t.Fatalf("keys equal: %q", a)
	}
	if got := (Query{Service: "db", Connect: true}).endpoint(); got != "/v1/health/connect/db" {
		t.Fatalf("endpoint %q", got)
	}
}
