package hcl

import (
	"slices"
	"strings"
	"testing"
)

// TestRouteUpgrades: a route tunnels WebSocket unless upgrades says
// otherwise; [] refuses every upgrade (an empty, non-nil list, which the
// gateway tells from its nil default); tokens are lower-cased.
func TestRouteUpgrades(t *testing.T) {
	cfg := mustParse(t, testListener+testUpstream)
	if got := cfg.Upstreams[0].Routes[0].Upgrades; !slices.Equal(got, []string{"websocket"}) {
		t.Errorf("default upgrades %q", got)
	}
	none := mustParse(t, testListener+strings.Replace(testUpstream, "route {}", "route {\n upgrades = []\n}", 1))
	if got := none.Upstreams[0].Routes[0].Upgrades; got == nil || len(got) != 0 {
		t.Errorf("upgrades = []: %#v", got)
	}
	more := mustParse(t, testListener+strings.Replace(testUpstream, "route {}", "route {\n upgrades = [\"WebSocket\", \"SPDY/3.1\"]\n}", 1))
	if got := more.Upstreams[0].Routes[0].Upgrades; !slices.Equal(got, []string{"websocket", "spdy/3.1"}) {
		t.Errorf("upgrades %q", got)
	}
}

// TestRouteUpgradesVersionedWebSocket: "websocket/13" is accepted (a valid
// protocol) with a warning, since no WebSocket client sends it.
func TestRouteUpgradesVersionedWebSocket(t *testing.T) {
	cfg := mustParse(t, testListener+strings.Replace(testUpstream, "route {}", "route {\n upgrades = [\"websocket/13\"]\n}", 1))
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0].Detail, "matches no WebSocket client") {
		t.Fatalf("warnings %v", cfg.Warnings)
	}
}
