package main

import (
	"fmt"
	"hash/fnv"
	"sync"

	"github.com/hashicorp/consul/api"
)

// registry registers, deregisters and flips the benchmark's instances.
//
// With one node (-nodes 1, the default) every instance is a service of the
// dev agent itself with a TTL check, as the setup says. Consul then
// holds 10,000 checks on one node, and each check write costs it time in
// proportion to the checks on that node (its event publisher reads every
// check of the node to build the changed instance's health), so Consul's own
// latency dominates the convergence.
//
// With -nodes N > 1 the instances are spread over N catalog nodes
// registered through /v1/catalog/register with a check each, and a flip
// rewrites that check through the same endpoint, as consul-esm does for
// external services: the layout of a real datacenter, where a client agent
// holds tens of services, on the same single Consul process.
type registry struct {
	cc    *api.Client
	node  string // the dev agent's node
	nodes int
}

// nodeOf returns the node of instance k of service name.
func (r registry) nodeOf(name string, k int) string {
	if r.nodes <= 1 {
		return r.node
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("scale-node-%03d", (int(h.Sum32()%uint32(r.nodes))+k)%r.nodes)
}

// key is an instance as the gateway and Consul name it: node/serviceID.
func (r registry) key(name string, k int, id string) string { return r.nodeOf(name, k) + "/" + id }

func checkIDOf(id string) string { return id + ":ttl" }

// register registers instance k (service ID id) of service name at port,
// passing.
func (r registry) register(name, id string, k, port int) error {
	if r.nodes <= 1 {
		return registerInstance(r.cc, name, id, port)
	}
	node := r.nodeOf(name, k)
	_, err := r.cc.Catalog().Register(&api.CatalogRegistration{Node: node, Address: "127.0.0.1",
		Service: &api.AgentService{ID: id, Service: name, Address: "127.0.0.1", Port: port},
		Check: &api.AgentCheck{Node: node, CheckID: checkIDOf(id), Name: "ttl", Status: api.HealthPassing,
			ServiceID: id, ServiceName: name}}, nil)
	if err != nil {
		return fmt.Errorf("register %s on %s: %w", id, node, err)
	}
	return nil
}

// deregister removes instance k (service ID id) of service name.
func (r registry) deregister(name, id string, k int) error {
	var err error
	if r.nodes <= 1 {
		err = r.cc.Agent().ServiceDeregister(id)
	} else {
		_, err = r.cc.Catalog().Deregister(&api.CatalogDeregistration{Node: r.nodeOf(name, k), ServiceID: id}, nil)
	}
	if err != nil {
		return fmt.Errorf("deregister %s: %w", id, err)
	}
	return nil
}

// setCheck sets the check of instance k (service ID id) of service name.
func (r registry) setCheck(name, id string, k int, status string) error {
	var err error
	if r.nodes <= 1 {
		err = r.cc.Agent().UpdateTTL(checkIDOf(id), "scale", status)
	} else {
		node := r.nodeOf(name, k)
		_, err = r.cc.Catalog().Register(&api.CatalogRegistration{Node: node, Address: "127.0.0.1", SkipNodeUpdate: true,
			Check: &api.AgentCheck{Node: node, CheckID: checkIDOf(id), Name: "ttl", Status: status, Output: "scale",
				ServiceID: id, ServiceName: name}}, nil)
	}
	if err != nil {
		return fmt.Errorf("set check of %s: %w", id, err)
	}
	return nil
}

// registerAll registers instances × services through the catalog, 8 at a
// time (the one-node layout is in Consul's configuration instead).
func (r registry) registerAll(services, instances int, ports []int) error {
	type job struct{ i, k int }
	jobs := make(chan job)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if err := r.register(serviceName(j.i), instanceID(j.i, j.k), j.k, ports[j.k]); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range services {
		for k := range instances {
			jobs <- job{i, k}
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}
