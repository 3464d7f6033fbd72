package hcl

import (
	"strings"
	"testing"
)

// TestListenerEarlyData: early_data is off unless set; the agent passes it
// on as gateway.ListenerConfig.EarlyData (agent/earlydata_test.go).
func TestListenerEarlyData(t *testing.T) {
	if cfg := mustParse(t, testListener+testUpstream); cfg.Listeners[0].EarlyData {
		t.Error("early_data is on by default")
	}
	on := strings.Replace(testListener, `address = "127.0.0.1:8443"`, `address = "127.0.0.1:8443"
  early_data = true`, 1)
	if cfg := mustParse(t, on+testUpstream); !cfg.Listeners[0].EarlyData || len(cfg.Warnings) != 0 {
		t.Errorf("early_data = true: %+v, warnings %v", cfg.Listeners[0], cfg.Warnings)
	}
}
