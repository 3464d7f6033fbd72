package agent

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/hcl"
	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

// The catalog at scale (issue 26): what a change costs the agent, from the
// moment a snapshot reaches it (a watch recorded it and kicked the applier)
// to the new routing being served. Each benchmark runs the applier's flush
// (discoverySet.flush: feeds, then onCatalog = Agent.applyCatalog: the
// catalog merge, the gateway's Apply with route.Build, discovery's
// re-targeting and the report) on a real agent (New, its listener bound)
// whose discovery set holds 5,000 catalog services of 2 passing instances
// each. The watches are stand-ins holding their last snapshot, as running
// ones would between two Consul answers; the coalescing wait before a flush
// (coalesceQuiet) is not included.

// catalogBenchServices is the size of the catalog the benchmarks run on.
const catalogBenchServices = 5000

// catalogBench is an agent in the catalog mode, synced with a catalog of n
// services, each with a host route svcN.example.com/ and every tenth with
// a path route /svcN too; every hundredth (svc1, svc101…) also declares
// the path route of the service before it, and loses that conflict.
type catalogBench struct {
	a        *Agent
	d        *discoverySet
	services map[string][]string // the catalog snapshot's Services
}

func newCatalogBench(b *testing.B, n int) *catalogBench {
	b.Helper()
	dir := b.TempDir()
	cert, err := selfsigned.New("localhost", "127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, cert.CertPEM, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(keyFile, cert.KeyPEM, 0o600); err != nil {
		b.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "gateway.hcl")
	// Consul is never contacted: the watches below are stand-ins.
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf(`
listener "main" {
  address = "127.0.0.1:0"
  tls {
    cert_file = %q
    key_file  = %q
  }
}
consul {
  address = "127.0.0.1:1"
  catalog {
    tag_prefix = "impulse"
  }
}
upstream "web" {
  route {
    path_prefix = "/"
  }
  backend "b" {
    address = "http://127.0.0.1:8080"
  }
}
`, certFile, keyFile)), 0o600); err != nil {
		b.Fatal(err)
	}
	a, err := New(Options{ConfigPaths: []string{cfgFile}, LogOutput: io.Discard, LogLevel: "info"})
	if err != nil {
		b.Fatal(err)
	}
	if err := a.gw.Start(context.Background(), a.base.Listeners); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		a.disc.stop()
		_ = a.gw.Shutdown(context.Background())
		a.closeTracing()
		a.tel.close()
	})

	cb := &catalogBench{a: a, d: a.disc, services: map[string][]string{}}
	for i := range n {
		svc := fmt.Sprintf("svc%d", i)
		tags := []string{"impulse.route=" + svc + ".example.com/"}
		if i%10 == 0 {
			tags = append(tags, "impulse.route=/"+svc)
		}
		if i%100 == 1 {
			tags = append(tags, fmt.Sprintf("impulse.route=/svc%d", i-1))
		}
		cb.services[svc] = tags
	}
	cfg := a.cfg
	client, err := discovery.New(discoveryConfig(cfg.Consul))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	d := cb.d
	d.mu.Lock()
	d.client, d.consul, d.token = client, *cfg.Consul, cfg.Consul.Token
	d.catalog = &catalogWatch{q: discovery.CatalogQuery{TagPrefix: cfg.Consul.Catalog.TagPrefix, Filter: cfg.Consul.Catalog.Filter},
		cancel: func() {}, done: closedChan(), since: now, applied: true,
		last: &discovery.CatalogSnapshot{Services: cb.services, Index: 1, Time: now}}
	for svc := range cb.services {
		q := query(&hcl.UpstreamConsul{Service: svc, Health: hcl.DefaultHealth})
		d.watches[q.Key()] = &watch{q: q, cancel: func() {}, done: closedChan(), since: now, applied: true,
			subs: map[string]string{}, last: instanceSnapshot(q, 0)}
	}
	d.catalog.last.Query = d.catalog.q
	d.mu.Unlock()
	// The benchmarks flush themselves: no applier goroutine flushes too.
	d.stopApp()
	<-d.appDone
	// The first catalog apply, as at startup: every catalog upstream is
	// created, subscribed to its watch and fed its instances.
	cb.setCatalog(cb.services)
	d.flush()
	if got := len(a.gw.Routes()); got != n+n/10+1 {
		b.Fatalf("%d routes after the first apply, want %d", got, n+n/10+1)
	}
	if got := len(a.catalog.Load().Conflicts); got != n/100 {
		b.Fatalf("%d conflicts after the first apply, want %d", got, n/100)
	}
	return cb
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// instanceSnapshot is a watch's snapshot of 2 passing instances of q's
// service; port varies them.
func instanceSnapshot(q discovery.Query, port int) *discovery.Snapshot {
	s := &discovery.Snapshot{Query: q, Index: 1, Time: time.Now()}
	for j := range 2 {
		s.Instances = append(s.Instances, discovery.Instance{
			ID: fmt.Sprintf("node%d/%s-%d", j, q.Service, j), Node: fmt.Sprintf("node%d", j), ServiceID: fmt.Sprintf("%s-%d", q.Service, j),
			Address: fmt.Sprintf("10.0.%d.%d", j, 1+len(q.Service)%250), Port: 8080 + port, Weight: 1,
			Meta: map[string]string{"version": "1"},
		})
	}
	return s
}

// setCatalog records services as the catalog watch's new snapshot, as its
// emit does.
func (cb *catalogBench) setCatalog(services map[string][]string) {
	cw := cb.d.catalog
	cw.mu.Lock()
	cw.last = &discovery.CatalogSnapshot{Query: cw.q, Services: services, Index: cw.last.Index + 1, Time: time.Now()}
	cw.dirty = true
	cw.mu.Unlock()
}

// BenchmarkCatalogRebuild5000: one service of 5,000 changes its route tags
// (a route added, then removed again): the whole path from the catalog
// snapshot to the gateway serving the new route table.
func BenchmarkCatalogRebuild5000(b *testing.B) {
	cb := newCatalogBench(b, catalogBenchServices)
	changed := maps.Clone(cb.services)
	changed["svc2500"] = append([]string{"impulse.route=/extra"}, changed["svc2500"]...)
	snaps := []map[string][]string{changed, cb.services}
	gen := cb.a.gw.Generation()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		cb.setCatalog(snaps[i%2])
		cb.d.flush()
		i++
	}
	b.StopTimer()
	if cb.a.gw.Generation() != gen+uint64(i) {
		b.Fatalf("%d gateway applies for %d changes", cb.a.gw.Generation()-gen, i)
	}
}

// BenchmarkCatalogInstances5000: the instances of one catalog service of
// 5,000 change (a new port): its backends are fed, then the catalog is
// merged again since ServiceMeta could have changed its routes; here they
// did not, so the gateway's configuration stays.
func BenchmarkCatalogInstances5000(b *testing.B) {
	cb := newCatalogBench(b, catalogBenchServices)
	q := query(&hcl.UpstreamConsul{Service: "svc2500", Health: hcl.DefaultHealth})
	w := cb.d.watches[q.Key()]
	snaps := []*discovery.Snapshot{instanceSnapshot(q, 1), instanceSnapshot(q, 0)}
	gen := cb.a.gw.Generation()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		w.deliver(cb.d, *snaps[i%2])
		cb.d.flush()
		i++
	}
	b.StopTimer()
	if cb.a.gw.Generation() != gen {
		b.Fatalf("%d gateway applies for instance changes that change no route", cb.a.gw.Generation()-gen)
	}
}
