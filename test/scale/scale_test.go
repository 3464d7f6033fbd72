package main

import (
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testtool"
)

// servicesEnv overrides the number of services of TestB06ScaleQuick.
const servicesEnv = "IMPULSE_SCALE_SERVICES"

// TestB06ScaleQuick is case B06 at CI size: the benchmark's -quick preset
// (1,000 services × 2 instances with TTL checks, or $IMPULSE_SCALE_SERVICES,
// on a Consul dev agent with its stock limits, consul.wait 2s, 10 s idle,
// two 3 s windows of a flip every 100 ms, no churn; about a minute). It
// fails unless the agent becomes ready, never holds more than 8 TCP
// connections to Consul at once, sends at most 3 requests to Consul per
// check change, and routes every upstream to exactly the instances Consul
// reports passing at the end. It needs Consul ($CONSUL_BIN or
// scripts/consul.sh): missing, it fails in CI and is skipped elsewhere
// (internal/testtool). The report is logged.
func TestB06ScaleQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("about a minute against a real Consul agent")
	}
	t.Setenv("CONSUL_BIN", testtool.Built(t, "CONSUL_BIN", "consul.sh"))
	var o options
	o.flags(flag.NewFlagSet("scale", flag.ContinueOnError)) // the defaults
	o.quickPreset(nil)
	if v := os.Getenv(servicesEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of services ≥ 1", servicesEnv, v)
		}
		o.services = n
	}
	o.args = "-quick -services " + strconv.Itoa(o.services)
	var report strings.Builder
	o.out = &report
	var err error
	if o.agentBin, err = buildAgent(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := o.finish(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	res, err := run(o)
	t.Logf("report (%s services, %s):\n%s", strconv.Itoa(o.services), time.Since(began).Round(time.Second), report.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range res.gates() {
		if g.ok {
			t.Logf("PASS %s: %s", g.name, g.value)
		} else {
			t.Errorf("FAIL %s: %s", g.name, g.value)
		}
	}
}
