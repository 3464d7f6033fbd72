package soak

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/impulse-agent/impulse-agent/internal/testpki"
	"github.com/impulse-agent/impulse-agent/test/consultest"
	"github.com/impulse-agent/impulse-agent/test/testproc"
)

const service = "soak-api"

// instance is a backend process registered in Consul as service.
type instance struct {
	id   string
	proc *testproc.Proc
}

// kill is a SIGKILL of a backend process: from the signal until the
// process was reaped.
type kill struct {
	backend  string
	from, to time.Time
}

// world owns the soak's processes and what Consul should hold.
type world struct {
	t                 *testing.T
	consul            *consultest.Agent
	gw                *gatewayProc
	cfgPath           string
	cfgs              [2]string // the two alternating configurations
	ca                *testpki.CA
	certFile, keyFile string

	mu        sync.Mutex
	instances map[string]*instance // registered (or meant to be) in Consul
	kills     []kill
	faults    map[string]int // fault → times injected
	errs      []string       // fault steps that did not go as planned
	seq       int
}

func (w *world) count(fault string) {
	w.mu.Lock()
	w.faults[fault]++
	w.mu.Unlock()
}

func (w *world) fail(format string, args ...any) {
	w.mu.Lock()
	w.errs = append(w.errs, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// startInstance starts a normal backend process named id and registers it.
func (w *world) startInstance(id string) {
	p := testproc.Start(w.t, backendEnv+"="+id+" normal")
	w.mu.Lock()
	w.instances[id] = &instance{id: id, proc: p}
	w.mu.Unlock()
	w.register(id, p.Port)
}

func (w *world) register(id string, port int) {
	err := w.consul.Client().Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: id, Name: service, Address: "127.0.0.1", Port: port, Meta: map[string]string{"impulse-scheme": "http"},
		Check: &api.AgentServiceCheck{CheckID: id + ":ttl", TTL: "10m", Status: api.HealthPassing},
	})
	if err != nil {
		w.fail("register %s: %v", id, err)
	}
}

func (w *world) deregister(id string) {
	w.mu.Lock()
	delete(w.instances, id)
	w.mu.Unlock()
	if err := w.consul.Client().Agent().ServiceDeregister(id); err != nil {
		w.fail("deregister %s: %v", id, err)
	}
}

// killAndReplace SIGKILLs instance id while Consul still reports it
// passing, lets Consul lag for lag, starts and registers a replacement,
// then deregisters the dead one (as a scheduler would).
func (w *world) killAndReplace(id string, lag time.Duration) {
	w.mu.Lock()
	in := w.instances[id]
	w.seq++
	next := fmt.Sprintf("api-r%d", w.seq)
	w.mu.Unlock()
	if in == nil {
		w.fail("kill: no instance %s", id)
		return
	}
	k := kill{backend: id, from: time.Now()}
	in.proc.Kill()
	k.to = time.Now()
	w.mu.Lock()
	w.kills = append(w.kills, k)
	w.mu.Unlock()
	w.count("backend SIGKILL + replacement (Consul lagging " + lag.String() + ")")
	time.Sleep(lag) // Consul has not noticed: the gateway's own tracking must
	w.startInstance(next)
	w.deregister(id)
}

// churn deregisters and re-registers the churn instance.
func (w *world) churn(registered bool) {
	w.mu.Lock()
	in := w.instances["api-churn"]
	w.mu.Unlock()
	if in == nil {
		return
	}
	if registered {
		if err := w.consul.Client().Agent().ServiceDeregister("api-churn"); err != nil {
			w.fail("churn deregister: %v", err)
		}
	} else {
		w.register("api-churn", in.proc.Port)
	}
	w.count("deregister/register churn")
}

// flap sets the TTL check of instance id.
func (w *world) flap(id, status string) {
	if err := w.consul.Client().Agent().UpdateTTL(id+":ttl", "soak flap", status); err != nil {
		w.fail("flap %s %s: %v", id, status, err)
	}
	w.count("check flap")
}

// restartConsul restarts the dev agent (it comes back empty) and
// registers every instance again, as node-local definitions would.
func (w *world) restartConsul() {
	w.consul.Restart()
	w.mu.Lock()
	var ins []*instance
	for _, in := range w.instances {
		ins = append(ins, in)
	}
	w.mu.Unlock()
	for _, in := range ins {
		w.register(in.id, in.proc.Port)
	}
	w.count("Consul agent restart")
}

// reload writes configuration i and asks the gateway to reload it.
func (w *world) reload(i int) {
	if err := os.WriteFile(w.cfgPath, []byte(w.cfgs[i%2]), 0o600); err != nil {
		w.fail("write config: %v", err)
		return
	}
	resp, err := http.Post(w.gw.control+"/v1/reload", "", nil)
	if err != nil {
		w.fail("reload %d: %v", i, err)
		return
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		w.fail("reload %d: %d", i, resp.StatusCode)
	}
	w.count("reload (alternating configurations)")
}

// rotateCertificate issues a new listener certificate from the same CA,
// replaces the files atomically and reloads.
func (w *world) rotateCertificate(i int) {
	certPEM, keyPEM := testpki.PEM(w.t, w.ca.Issue(w.t, testpki.Leaf{CN: "localhost", DNS: []string{"localhost"}, IPs: loopbackIPs}))
	for path, data := range map[string][]byte{w.certFile: certPEM, w.keyFile: keyPEM} {
		tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			w.fail("rotate: %v", err)
			return
		}
		if err := os.Rename(tmp, path); err != nil {
			w.fail("rotate: %v", err)
			return
		}
	}
	w.reload(i)
	w.count("certificate rotation")
}

// killedDuring names the backend kills that overlap [from, to] of
// backend (any backend when backend is "").
func (w *world) killedDuring(backend string, from, to time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range w.kills {
		if (backend == "" || k.backend == backend) && from.Before(k.to.Add(100*time.Millisecond)) && to.After(k.from) {
			return true
		}
	}
	return false
}
