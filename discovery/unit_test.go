package discovery

// Pure functions: configuration, query keys, conversion, error classification.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

func TestConfigDefaultsAndLimits(t *testing.T) {
	cfg, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Wait != 5*time.Minute || cfg.MinBackoff != 250*time.Millisecond || cfg.MaxBackoff != 30*time.Second ||
		cfg.Rate != DefaultRate || cfg.Burst != DefaultBurst || cfg.Logger == nil {
		t.Fatalf("defaults %+v", cfg)
	}
	for _, tc := range []struct {
		cfg     Config
		wantErr string
	}{
		{Config{Wait: time.Second}, ""},
		{Config{Wait: 10 * time.Minute}, ""},
		{Config{Wait: 999 * time.Millisecond}, "wait 999ms out of range"},
		{Config{Wait: 10*time.Minute + time.Second}, "wait 10m1s out of range"},
		{Config{Scheme: "ftp"}, `scheme "ftp"`},
		{Config{MinBackoff: time.Minute}, ""}, // max follows min
		{Config{MinBackoff: 2 * time.Second, MaxBackoff: time.Second}, "backoff 2s..1s"},
		{Config{MinBackoff: -time.Second}, "backoff"},
		{Config{Rate: -1}, "rate -1"},
		{Config{Burst: -1}, "burst -1"},
		{Config{TLS: TLSConfig{CertFile: "c.pem"}}, "cert_file and key_file"},
	} {
		_, err := tc.cfg.withDefaults()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.wantErr)
		}
	}
	if _, err := New(Config{Wait: time.Hour}); err == nil || !strings.HasPrefix(err.Error(), "discovery: ") {
		t.Errorf("New accepted wait 1h: %v", err)
	}
	if _, err := New(Config{TLS: TLSConfig{CAFile: "/nonexistent/ca.pem"}}); err == nil {
		t.Error("New accepted an unreadable CA file")
	}
}

func TestRequestTimeoutExceedsConsulJitter(t *testing.T) {
	for _, wait := range []time.Duration{MinWait, 20 * time.Second, DefaultWait, MaxWait} {
		if got := RequestTimeout(wait); got <= wait+wait/16 {
			t.Errorf("RequestTimeout(%s) = %s, want above %s", wait, got, wait+wait/16)
		}
	}
	c, err := New(Config{Wait: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if hc := c.http; hc.Timeout != RequestTimeout(20*time.Second) {
		t.Fatalf("http client timeout %s", hc.Timeout)
	}
}

func TestQueryKeyAndNormalize(t *testing.T) {
	a := Query{Service: "web", Tags: []string{"b", "a", "a"}}
	b := Query{Service: "web", Tags: []string{"a", "b"}, Health: HealthPassing}
	if a.Key() != b.Key() {
		t.Fatalf("equivalent queries differ: %q vs %q", a.Key(), b.Key())
	}
	for _, other := range []Query{
		{Service: "web", Tags: []string{"a"}},
		{Service: "web", Tags: []string{"a", "b"}, Health: HealthWarning},
		{Service: "web", Tags: []string{"a", "b"}, Datacenter: "dc2"},
		{Service: "web", Tags: []string{"a", "b"}, Namespace: "ns"},
		{Service: "web", Tags: []string{"a", "b"}, Partition: "p"},
		{Service: "api", Tags: []string{"a", "b"}},
	} {
		if other.Key() == a.Key() {
			t.Errorf("%+v has the key of %+v: %q", other, a, a.Key())
		}
	}
	if q, err := (Query{Service: "web"}).normalize(); err != nil || q.Health != HealthPassing {
		t.Errorf("normalize: %+v, %v", q, err)
	}
	for _, q := range []Query{{}, {Service: "web", Health: "critical"}} {
		if _, err := q.normalize(); err == nil {
			t.Errorf("%+v accepted", q)
		}
	}
	c, _ := New(Config{})
	if err := c.Watch(context.Background(), Query{}, func(Snapshot) {}); err == nil {
		t.Error("Watch accepted an empty service")
	}
	if err := c.Watch(context.Background(), Query{Service: "web"}, nil); err == nil {
		t.Error("Watch accepted a nil emit")
	}
}

// entry builds a health entry; checks are "id=status" (no service → node check).
func entry(node, id, addr string, port int, tags []string, w api.AgentWeights, checks ...string) *api.ServiceEntry {
	e := &api.ServiceEntry{
		Node:    &api.Node{Node: node, Address: "192.0.2.1"},
		Service: &api.AgentService{ID: id, Service: "web", Address: addr, Port: port, Tags: tags, Weights: w},
	}
	for _, c := range checks {
		cid, status, _ := strings.Cut(c, "=")
		e.Checks = append(e.Checks, &api.HealthCheck{Node: node, CheckID: cid, Status: status})
	}
	return e
}

func TestInstancesConversion(t *testing.T) {
	w := api.AgentWeights{Passing: 10, Warning: 2}
	entries := []*api.ServiceEntry{
		entry("n2", "z", "", 82, []string{"v1"}, w, "serfHealth=passing", "z:ttl=passing"),
		entry("n1", "a", "10.0.0.1", 80, []string{"v1", "blue"}, api.AgentWeights{}, "serfHealth=passing"),
		entry("n1", "warn", "10.0.0.2", 80, []string{"v1"}, w, "serfHealth=passing", "warn:ttl=warning"),
		entry("n1", "crit", "10.0.0.3", 80, []string{"v1"}, w, "serfHealth=passing", "crit:ttl=critical"),
		entry("n3", "nodedown", "10.0.0.4", 80, []string{"v1"}, w, "serfHealth=critical", "x=passing"),
		entry("n1", "maint", "10.0.0.5", 80, []string{"v1"}, w, "serfHealth=passing", "_service_maintenance:maint=critical"),
		entry("n4", "nodemaint", "10.0.0.6", 80, []string{"v1"}, w, "_node_maintenance=critical", "serfHealth=passing"),
		entry("n1", "weird", "10.0.0.7", 80, []string{"v1"}, w, "serfHealth=unknown-status"),
		{Node: &api.Node{Node: "n9"}}, // no service: skipped
		nil,
	}
	ids := func(ins []Instance) string {
		var s []string
		for _, in := range ins {
			s = append(s, fmt.Sprintf("%s@%s:%d/w%d", in.ID, in.Address, in.Port, in.Weight))
		}
		return strings.Join(s, " ")
	}
	for _, tc := range []struct {
		q    Query
		want string
	}{
		{Query{Service: "web", Health: HealthPassing}, "n1/a@10.0.0.1:80/w1 n2/z@192.0.2.1:82/w10"},
		{Query{Service: "web", Health: HealthWarning}, "n1/a@10.0.0.1:80/w1 n1/warn@10.0.0.2:80/w2 n2/z@192.0.2.1:82/w10"},
		{Query{Service: "web", Health: HealthWarning, Tags: []string{"blue", "v1"}}, "n1/a@10.0.0.1:80/w1"},
		{Query{Service: "web", Health: HealthPassing, Tags: []string{"nope"}}, ""},
	} {
		if got := ids(instances(tc.q, entries)); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.q.Key(), got, tc.want)
		}
	}
	// The conversion copies tags and meta: Consul's structures are not shared.
	e := entry("n1", "a", "10.0.0.1", 80, []string{"v1"}, w, "serfHealth=passing")
	e.Service.Meta = map[string]string{"k": "v"}
	in := instances(Query{Service: "web", Health: HealthPassing}, []*api.ServiceEntry{e})[0]
	e.Service.Tags[0], e.Service.Meta["k"] = "changed", "changed"
	if in.Tags[0] != "v1" || in.Meta["k"] != "v" {
		t.Fatalf("instance shares memory with the API reply: %+v", in)
	}
}

type netTimeout struct{}

func (netTimeout) Error() string   { return "i/o timeout" }
func (netTimeout) Timeout() bool   { return true }
func (netTimeout) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	const ep = "/v1/health/service/web"
	var syntaxErr error = &json.SyntaxError{Offset: 3}
	for _, tc := range []struct {
		err     error
		reason  string
		status  int
		message string
	}{
		{api.StatusError{Code: 403, Body: "ACL not found"}, "http_403", 403, "discovery: GET " + ep + ": status 403: ACL not found"},
		{api.StatusError{Code: 500, Body: "No cluster leader"}, "http_500", 500, "status 500: No cluster leader"},
		{api.StatusError{Code: 502, Body: strings.Repeat("x", 1000)}, "http_502", 502, "…"},
		{errACLFiltered, reasonACLFiltered, 0, "acl_filtered: empty result filtered"},
		{context.DeadlineExceeded, reasonTimeout, 0, "timeout"},
		{netTimeout{}, reasonTimeout, 0, "timeout: i/o timeout"},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, reasonTransport, 0, "transport: dial: connection refused"},
		{fmt.Errorf("decoding: %w", syntaxErr), reasonDecode, 0, "decode"},
	} {
		qe := classify(ep, tc.err)
		if qe.reason != tc.reason || qe.status != tc.status || !strings.Contains(qe.Error(), tc.message) {
			t.Errorf("classify(%v) = %q status %d %q; want %q status %d containing %q",
				tc.err, qe.reason, qe.status, qe.Error(), tc.reason, tc.status, tc.message)
		}
		if len(qe.Error()) > 400 {
			t.Errorf("message not truncated: %d bytes", len(qe.Error()))
		}
	}
}
