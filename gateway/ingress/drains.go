package ingress

import (
	"context"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// Drains are the ingresses a reconfiguration stopped, draining in the
// background: the gateway's Shutdown waits for them (Wait), its Close cuts
// them short (ForceAll). The zero value is ready.
type Drains struct {
	wg    sync.WaitGroup
	mu    sync.Mutex
	next  int
	force map[int]func()
}

// Background runs drain (bounded by the context it was built with) on its
// own goroutine; force is its forced stop. A failed drain is logged to
// log under the listener's name.
func (d *Drains) Background(log hclog.Logger, name string, drain func() error, force func()) {
	d.mu.Lock()
	if d.force == nil {
		d.force = map[int]func(){}
	}
	id := d.next
	d.next++
	d.force[id] = force
	d.mu.Unlock()
	d.wg.Go(func() {
		if err := drain(); err != nil {
			log.Warn("listener drain", "listener", name, "error", err)
		}
		d.mu.Lock()
		delete(d.force, id)
		d.mu.Unlock()
	})
}

// ForceAll cuts every background drain short.
func (d *Drains) ForceAll() {
	d.mu.Lock()
	fs := make([]func(), 0, len(d.force))
	for _, f := range d.force {
		fs = append(fs, f)
	}
	d.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Wait waits for the background drains until ctx is done, then forces them.
func (d *Drains) Wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		d.ForceAll()
		<-done
	}
}
