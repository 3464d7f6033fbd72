package consultest

import (
	"testing"

	"github.com/hashicorp/consul/api"
)

// Register registers a service with the agent (PUT /v1/agent/service/register).
// The agent syncs it to the catalog asynchronously, within milliseconds.
func (a *Agent) Register(t testing.TB, reg api.AgentServiceRegistration) {
	t.Helper()
	if err := a.client.Agent().ServiceRegister(&reg); err != nil {
		t.Fatalf("consultest: register service %q: %v", reg.ID, err)
	}
}

// RegisterTTL registers service id of name at address:port with a TTL check
// (10 minutes, so it never expires during a test) that starts passing, and
// returns the check's ID for SetCheck.
func (a *Agent) RegisterTTL(t testing.TB, id, name, address string, port int, tags []string, meta map[string]string) (checkID string) {
	t.Helper()
	checkID = id + ":ttl"
	a.Register(t, api.AgentServiceRegistration{
		ID: id, Name: name, Address: address, Port: port, Tags: tags, Meta: meta,
		Check: &api.AgentServiceCheck{CheckID: checkID, TTL: "10m", Status: api.HealthPassing},
	})
	return checkID
}

// RegisterCheck registers a check; without ServiceID it is a node check, which
// affects every service instance on the agent's node.
func (a *Agent) RegisterCheck(t testing.TB, reg api.AgentCheckRegistration) {
	t.Helper()
	if err := a.client.Agent().CheckRegister(&reg); err != nil {
		t.Fatalf("consultest: register check %q: %v", reg.ID, err)
	}
}

// DeregisterCheck removes a check registered with RegisterCheck.
func (a *Agent) DeregisterCheck(t testing.TB, checkID string) {
	t.Helper()
	if err := a.client.Agent().CheckDeregister(checkID); err != nil {
		t.Fatalf("consultest: deregister check %q: %v", checkID, err)
	}
}

// SetCheck sets a TTL check's status: "passing", "warning" or "critical".
func (a *Agent) SetCheck(t testing.TB, checkID, status string) {
	t.Helper()
	if err := a.client.Agent().UpdateTTL(checkID, "set by consultest", status); err != nil {
		t.Fatalf("consultest: set check %q to %s: %v", checkID, status, err)
	}
}

// Deregister removes a service (PUT /v1/agent/service/deregister/<id>).
func (a *Agent) Deregister(t testing.TB, id string) {
	t.Helper()
	if err := a.client.Agent().ServiceDeregister(id); err != nil {
		t.Fatalf("consultest: deregister service %q: %v", id, err)
	}
}

// Maintenance puts service id into maintenance mode or takes it out; in
// maintenance it carries a critical _service_maintenance check.
func (a *Agent) Maintenance(t testing.TB, id string, enable bool) {
	t.Helper()
	var err error
	if enable {
		err = a.client.Agent().EnableServiceMaintenance(id, "consultest")
	} else {
		err = a.client.Agent().DisableServiceMaintenance(id)
	}
	if err != nil {
		t.Fatalf("consultest: service %q maintenance=%v: %v", id, enable, err)
	}
}

// NodeMaintenance puts the agent's node into maintenance mode or takes it
// out; it affects every service instance on the node.
func (a *Agent) NodeMaintenance(t testing.TB, enable bool) {
	t.Helper()
	var err error
	if enable {
		err = a.client.Agent().EnableNodeMaintenance("consultest")
	} else {
		err = a.client.Agent().DisableNodeMaintenance()
	}
	if err != nil {
		t.Fatalf("consultest: node maintenance=%v: %v", enable, err)
	}
}

// RegisterExternal registers a node of its own, with its services and checks,
// directly in the catalog (PUT /v1/catalog/register), as an external-service
// monitor would. Checks without ServiceID are node checks of that node only,
// e.g. a critical "serfHealth" for a failed node. The agent's anti-entropy
// leaves other nodes alone, so the entry stays until DeregisterExternal.
func (a *Agent) RegisterExternal(t testing.TB, reg api.CatalogRegistration) {
	t.Helper()
	if _, err := a.client.Catalog().Register(&reg, nil); err != nil {
		t.Fatalf("consultest: catalog register node %q: %v", reg.Node, err)
	}
}

// DeregisterExternal removes a node registered with RegisterExternal and
// everything on it.
func (a *Agent) DeregisterExternal(t testing.TB, node string) {
	t.Helper()
	if _, err := a.client.Catalog().Deregister(&api.CatalogDeregistration{Node: node}, nil); err != nil {
		t.Fatalf("consultest: catalog deregister node %q: %v", node, err)
	}
}
