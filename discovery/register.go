package discovery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/consul/api"
)

// Check statuses written to the registration's TTL check, in Consul's terms.
const (
	StatusPassing  = api.HealthPassing
	StatusWarning  = api.HealthWarning
	StatusCritical = api.HealthCritical
)

// Registration is the gateway's own service in the Consul catalog
// (consul.register).
type Registration struct {
	// ID is the service ID, unique on the Consul agent; Service is the
	// service name.
	ID, Service string
	Tags        []string
	Meta        map[string]string
	// Address is advertised as the service address; empty means the Consul
	// agent's node address. Port is the listener's UDP port.
	Address string
	Port    int
	// TTL of the readiness check (default 15s); it is refreshed every TTL/3.
	TTL time.Duration
	// DeregisterCriticalAfter lets Consul remove a gateway that died without
	// deregistering (default 1m; Consul's minimum is 1m).
	DeregisterCriticalAfter time.Duration
}

// Readiness reports the check status (StatusPassing, StatusWarning or
// StatusCritical) and a human-readable note for the check output.
type Readiness func() (status, note string)

// Register keeps reg registered with a TTL check that mirrors ready, until
// ctx is done; then it deregisters (bounded by 5 s) and returns nil. When
// the Consul agent forgets the service (agent restart: the check update
// answers 404/500 "does not have associated TTL" or "unknown check"), it
// registers again. Errors are logged and retried with backoff; Register only
// returns early for an invalid registration.
func (c *Client) Register(ctx context.Context, reg Registration, ready Readiness) error {
	if reg.ID == "" || reg.Service == "" || reg.Port < 1 || reg.Port > 65535 {
		return fmt.Errorf("discovery: registration needs an ID, a service name and a port (got %q, %q, %d)", reg.ID, reg.Service, reg.Port)
	}
	if reg.TTL <= 0 {
		reg.TTL = 15 * time.Second
	}
	if reg.DeregisterCriticalAfter <= 0 {
		reg.DeregisterCriticalAfter = time.Minute
	}
	log := c.cfg.Logger.With("service_id", reg.ID)
	checkID := "service:" + reg.ID
	agent := c.api.Agent()
	registered, reregistered := false, false
	backoff := c.cfg.MinBackoff
	var status, note string // what the check was last set to
	for {
		var err error
		if !registered {
			err = agent.ServiceRegisterOpts(&api.AgentServiceRegistration{
				ID: reg.ID, Name: reg.Service, Tags: reg.Tags, Meta: reg.Meta, Address: reg.Address, Port: reg.Port,
				Check: &api.AgentServiceCheck{
					CheckID: checkID, Name: "impulse-agent readiness", TTL: reg.TTL.String(),
					Status:                         api.HealthCritical, // until the first update says otherwise
					DeregisterCriticalServiceAfter: reg.DeregisterCriticalAfter.String(),
				},
			}, api.ServiceRegisterOpts{}.WithContext(ctx))
			if err == nil {
				registered = true
				log.Info("registered in Consul", "service", reg.Service, "port", reg.Port)
			}
		}
		if err == nil {
			status, note = ready()
			err = agent.UpdateTTLOpts(checkID, note, status, (&api.QueryOptions{}).WithContext(ctx))
			var se api.StatusError
			if err != nil && errors.As(err, &se) && (se.Code == http.StatusNotFound || se.Code == http.StatusInternalServerError) {
				// The agent lost the registration (restarted): register again,
				// at once the first time, with backoff if that did not help.
				log.Warn("Consul agent forgot the registration; registering again", "status", se.Code)
				registered = false
				if !reregistered {
					reregistered = true
					continue
				}
			}
		}
		reregistered = false
		wait := reg.TTL / 3
		if err != nil && ctx.Err() == nil {
			log.Warn("Consul registration failed; retrying", "error", err, "retry_in", backoff)
			wait = backoff
			backoff = min(2*backoff, c.cfg.MaxBackoff)
		} else {
			backoff = c.cfg.MinBackoff
		}
		// Between refreshes, a change of readiness is pushed within
		// readinessPoll, not a third of the TTL later.
		unchanged := func() bool {
			if err != nil {
				return true // backing off: the next attempt pushes anyway
			}
			s, n := ready()
			return s == status && n == note
		}
		if !waitUnless(ctx, wait, unchanged) {
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := agent.ServiceDeregisterOpts(reg.ID, (&api.QueryOptions{}).WithContext(dctx)); err != nil {
				log.Warn("deregistering from Consul failed; Consul removes it after deregister_critical_service_after", "error", err)
			} else {
				log.Info("deregistered from Consul")
			}
			return nil
		}
	}
}

// readinessPoll is how often Register compares readiness with what the check
// says between refreshes. A variable for tests.
var readinessPoll = time.Second

// waitUnless waits for d, polling unchanged every readinessPoll and returning
// early once it reports false. It returns false when ctx is done.
func waitUnless(ctx context.Context, d time.Duration, unchanged func() bool) bool {
	due := time.Now().Add(d)
	for {
		left := time.Until(due)
		if left <= 0 {
			return true
		}
		t := time.NewTimer(min(left, readinessPoll))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		if !unchanged() {
			return true
		}
	}
}
