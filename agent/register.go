package agent

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// startRegistration registers this gateway in Consul (consul.register) with
// a TTL check that mirrors /v1/ready: passing when ready, warning when
// degraded, critical when not ready or draining. The returned stop
// deregisters and waits; call it before draining, so Consul stops sending
// new clients before the listeners close. A nil stop means no registration.
func (a *Agent) startRegistration(cfg *hcl.Config) (stop func(), err error) {
	if cfg.Consul == nil || cfg.Consul.Register == nil || len(cfg.Listeners) == 0 {
		return nil, nil
	}
	r := cfg.Consul.Register
	// The listener's UDP address, or its TCP one without h3: both share
	// the port that is registered.
	ap, err := netip.ParseAddrPort(a.gw.Addrs()[cfg.Listeners[0].Name].String())
	if err != nil {
		return nil, fmt.Errorf("agent: register: listener %q: %w", cfg.Listeners[0].Name, err)
	}
	advertise := r.Address
	if advertise == "" && !ap.Addr().IsUnspecified() {
		advertise = ap.Addr().Unmap().String()
	}
	host, _ := os.Hostname()
	dc := discoveryConfig(cfg.Consul)
	token, err := resolveToken(cfg.Consul)
	if err != nil {
		return nil, err
	}
	dc.Token, dc.TokenFile = token, ""
	dc.Logger, dc.Metrics = a.log.Named("register"), a.tel.metrics
	client, err := discovery.New(dc)
	if err != nil {
		return nil, fmt.Errorf("agent: register: %w", err)
	}
	reg := discovery.Registration{
		ID:      fmt.Sprintf("%s-%s-%d", r.Service, host, int(ap.Port())),
		Service: r.Service, Tags: r.Tags, Address: advertise, Port: int(ap.Port()),
		Meta: map[string]string{"protocols": strings.Join(cfg.Listeners[0].Protocols, ","), "impulse-listener": cfg.Listeners[0].Name},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				a.log.Error("registration panicked", "panic", p)
			}
		}()
		if err := client.Register(ctx, reg, a.checkStatus); err != nil {
			a.log.Error("consul registration", "error", err)
		}
	}()
	return func() { cancel(); <-done; client.Close() }, nil
}

// checkStatus maps readiness onto Consul check statuses.
func (a *Agent) checkStatus() (string, string) {
	ok, reasons, degraded := a.ready()
	switch {
	case !ok:
		return discovery.StatusCritical, "not ready: " + strings.Join(reasons, "; ")
	case len(degraded) > 0:
		return discovery.StatusWarning, "degraded: " + strings.Join(degraded, "; ")
	default:
		return discovery.StatusPassing, "ready (generation " + strconv.FormatUint(a.generation(), 10) + ")"
	}
}

func (a *Agent) generation() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gen
}
