package discovery

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
)

// TestExcludedConversion: the instances a health policy leaves out are
// reported with their aggregated status and failing checks (passing ones
// are not named), sorted by ID; instances without the query's tags are in
// neither list; the two lists never overlap.
func TestExcludedConversion(t *testing.T) {
	w := api.AgentWeights{Passing: 10, Warning: 2}
	entries := []*api.ServiceEntry{
		entry("n1", "ok", "10.0.0.1", 80, []string{"v1"}, w, "serfHealth=passing"),
		entry("n1", "warn", "10.0.0.2", 80, []string{"v1"}, w, "serfHealth=passing", "warn:ttl=warning"),
		entry("n1", "crit", "10.0.0.3", 80, []string{"v1"}, w, "serfHealth=passing", "crit:ttl=critical"),
		entry("n3", "nodedown", "", 80, []string{"v1"}, api.AgentWeights{}, "serfHealth=critical", "x=passing"),
		entry("n1", "maint", "10.0.0.5", 80, []string{"v1"}, w, "serfHealth=passing", "_service_maintenance:maint=critical"),
		entry("n1", "untagged", "10.0.0.6", 80, nil, w, "u=critical"),
		{Node: &api.Node{Node: "n9"}},
		nil,
	}
	show := func(xs []Excluded) string {
		var s []string
		for _, x := range xs {
			s = append(s, fmt.Sprintf("%s@%s:%d/w%d %s [%s]", x.ID, x.Address, x.Port, x.Weight, x.Status, strings.Join(x.Checks, ",")))
		}
		return strings.Join(s, "; ")
	}
	for _, tc := range []struct {
		q    Query
		want string
	}{
		{Query{Service: "web", Health: HealthPassing, Tags: []string{"v1"}},
			"n1/crit@10.0.0.3:80/w10 critical [crit:ttl: critical]; n1/maint@10.0.0.5:80/w10 maintenance [_service_maintenance:maint: critical]; " +
				"n1/warn@10.0.0.2:80/w10 warning [warn:ttl: warning]; n3/nodedown@192.0.2.1:80/w1 critical [serfHealth: critical]"},
		{Query{Service: "web", Health: HealthWarning, Tags: []string{"v1"}},
			"n1/crit@10.0.0.3:80/w10 critical [crit:ttl: critical]; n1/maint@10.0.0.5:80/w10 maintenance [_service_maintenance:maint: critical]; " +
				"n3/nodedown@192.0.2.1:80/w1 critical [serfHealth: critical]"},
	} {
		got := excluded(tc.q, entries)
		if show(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.q.Key(), show(got), tc.want)
		}
		for _, in := range instances(tc.q, entries) {
			for _, x := range got {
				if x.ID == in.ID {
					t.Errorf("%s both usable and excluded", in.ID)
				}
			}
		}
	}
	a := excluded(Query{Service: "web", Health: HealthPassing}, entries)
	entries[2].Checks[1].Output = "a new output" // not compared: it changes with every run of some checks
	b := excluded(Query{Service: "web", Health: HealthPassing}, entries)
	if !sameHealth(healthResult{excl: a}, healthResult{excl: b}) {
		t.Error("a new check output makes the answer look new")
	}
	entries[2].Checks[1].Status = api.HealthWarning
	if sameHealth(healthResult{excl: a}, healthResult{excl: excluded(Query{Service: "web", Health: HealthPassing}, entries)}) {
		t.Error("a check's new status is not a change")
	}
}
