package discovery

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// TestRegisterPushesReadinessChanges (real agent): the TTL check follows a
// change of readiness at the next poll, not a third of the TTL later, and the
// service leaves the catalog when the context ends.
func TestRegisterPushesReadinessChanges(t *testing.T) {
	t.Parallel()
	a := consultest.Start(t)
	c := newTestClient(t, a.Addr())
	var mu sync.Mutex
	status := StatusPassing
	ready := func() (string, string) {
		mu.Lock()
		defer mu.Unlock()
		return status, "test: " + status
	}
	const ttl = 60 * time.Second // refreshed every 20 s: far slower than the poll
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Register(ctx, Registration{ID: "edge-1", Service: "edge", Port: 8443, TTL: ttl}, ready)
	}()
	check := func() string {
		checks, _, err := a.Client().Health().Checks("edge", nil)
		if err != nil || len(checks) != 1 {
			return ""
		}
		return checks[0].Status
	}
	waitFor(t, "a passing check", func() bool { return check() == api.HealthPassing })
	for _, want := range []string{StatusCritical, StatusWarning, StatusPassing} {
		mu.Lock()
		status = want
		mu.Unlock()
		start := time.Now()
		waitFor(t, "the check to turn "+want, func() bool { return check() == want })
		if d := time.Since(start); d >= ttl/3 {
			t.Fatalf("readiness %s reached Consul after %s: at the refresh, not at the poll", want, d)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if check() != "" {
		t.Fatal("still registered after the context ended")
	}
}
