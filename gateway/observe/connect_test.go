package observe

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-metrics"
)

// TestConnectMetrics: the Connect family reaches go-metrics under the
// names and labels of interface.md (impulse_connect_*); authorizations are
// counted on the request path and handed over by Flush.
func TestConnectMetrics(t *testing.T) {
	sink := metrics.NewInmemSink(time.Hour, time.Hour)
	cfg := metrics.DefaultConfig("impulse")
	cfg.EnableHostname, cfg.EnableRuntimeMetrics = false, false
	m, _ := metrics.New(cfg, sink)
	gm := NewMetrics(m)
	gm.ConnectAuthorization(ConnectAllow, "client")
	gm.ConnectAuthorization(ConnectAllow, "client")
	gm.ConnectAuthorization("expired", "")
	if n := gm.ConnectAuthorizations(ConnectAllow, "client"); n != 2 {
		t.Fatalf("count %d, want 2", n)
	}
	if n := testing.AllocsPerRun(100, func() { gm.ConnectAuthorization(ConnectAllow, "client") }); n != 0 {
		t.Fatalf("counting allocates %v times", n)
	}
	gm.ConnectLeafExpiry("web", 3600.7)
	gm.ConnectH3Fallback("db")
	gm.Flush(time.Now(), func(string) bool { return true })
	got := map[string]float64{}
	key := func(name string, ls []metrics.Label) string {
		var parts []string
		for _, l := range ls {
			parts = append(parts, l.Name+"="+l.Value)
		}
		return name + "{" + strings.Join(parts, ",") + "}"
	}
	for _, iv := range sink.Data() {
		for _, c := range iv.Counters {
			got[key(c.Name, c.Labels)] += float64(c.Sum)
		}
		for _, g := range iv.PrecisionGauges {
			got[key(g.Name, g.Labels)] = g.Value
		}
	}
	for k, v := range map[string]float64{
		"impulse.connect.authorizations{result=allow,source=client}": 103, // AllocsPerRun's warm-up run too
		"impulse.connect.authorizations{result=expired,source=}":     1,
		"impulse.connect.leaf_expiry_seconds{service=web}":           3600,
		"impulse.connect.h3_fallbacks{upstream=db}":                  1,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
