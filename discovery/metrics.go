package discovery

import (
	"strconv"
	"time"

	"github.com/hashicorp/go-metrics"
	"github.com/hashicorp/go-metrics/prometheus"
)

// Metric keys, relative to the go-metrics service name: with the agent's
// metrics.Config.ServiceName = "impulse" (as Consul uses "consul") they are
// emitted as impulse.discovery.query.duration and so on. Labels are bounded:
// service is a watched service name (or CatalogEndpoint for the catalog
// watch), reason one of a small set. The
// "service" label means the Consul service: leave the go-metrics
// EnableServiceLabel option off, it would add a second "service" label.
var (
	keyQueryDuration = []string{"discovery", "query", "duration"}
	keyQueryErrors   = []string{"discovery", "query", "errors"}
	keyLastSuccess   = []string{"discovery", "query", "last_success"}
	keyIndexResets   = []string{"discovery", "query", "index_resets"}
	keyResyncHeld    = []string{"discovery", "resync_held"}
	keyInstances     = []string{"discovery", "instances"}
	keyLastContact   = []string{"discovery", "query", "last_contact"}
)

// Summaries, Counters and Gauges declare this package's metrics with help
// text, for the agent to register with its Prometheus sink (names relative to
// the service-name prefix, like Consul's definitions): the summary
// discovery.query.duration (ms), the counters discovery.query.errors and
// discovery.query.index_resets and discovery.resync_held, the gauges discovery.query.last_success (unix
// seconds) and discovery.instances.
var (
	Summaries = []prometheus.SummaryDefinition{{
		Name: keyQueryDuration,
		Help: "Duration of one Consul health (or catalog) query in milliseconds, blocking wait included; labels service (/v1/catalog/services for the catalog watch), outcome (ok or error).",
	}}
	Counters = []prometheus.CounterDefinition{{
		Name: keyQueryErrors,
		Help: "Failed Consul health (or catalog) queries; labels service (/v1/catalog/services for the catalog watch), reason (timeout, transport, decode, acl_filtered, http_<status>).",
	}, {
		Name: keyIndexResets,
		Help: "Replies whose X-Consul-Index went backwards or was 0, resetting the blocking index; label service.",
	}, {
		Name: keyResyncHeld,
		Help: "Resync holds: an answer right after a Consul outage, index reset or reload lacked instances (was empty) or catalog services the gateway had, and they were kept during consul.resync_grace; counted once per hold; label service.",
	}}
	Gauges = []prometheus.GaugeDefinition{{
		Name: keyLastSuccess,
		Help: "Unix time in seconds of the last successful Consul health (or catalog) query; label service.",
	}, {
		Name: keyLastContact,
		Help: "With consul.stale: X-Consul-LastContact of the last reply in milliseconds, how far the answering server lagged the leader; label service.",
	}, {
		Name: keyInstances,
		Help: "Usable instances in the last emitted snapshot; label service.",
	}}
)

// sink wraps an optional *metrics.Metrics; the zero value discards.
type sink struct{ m *metrics.Metrics }

func svc(service string) metrics.Label { return metrics.Label{Name: "service", Value: service} }

func (s sink) queryDone(service string, start time.Time, err error) {
	if s.m == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	s.m.MeasureSinceWithLabels(keyQueryDuration, start, []metrics.Label{svc(service), {Name: "outcome", Value: outcome}})
}

func (s sink) queryError(service, reason string) {
	if s.m != nil {
		s.m.IncrCounterWithLabels(keyQueryErrors, 1, []metrics.Label{svc(service), {Name: "reason", Value: reason}})
	}
}

func (s sink) success(service string, at time.Time) {
	if s.m != nil {
		s.m.SetPrecisionGaugeWithLabels(keyLastSuccess, float64(at.UnixNano())/1e9, []metrics.Label{svc(service)})
	}
}

func (s sink) lastContact(service string, d time.Duration) {
	if s.m != nil {
		s.m.SetGaugeWithLabels(keyLastContact, float32(d.Milliseconds()), []metrics.Label{svc(service)})
	}
}

func (s sink) indexReset(service string) {
	if s.m != nil {
		s.m.IncrCounterWithLabels(keyIndexResets, 1, []metrics.Label{svc(service)})
	}
}

func (s sink) resyncHeld(service string) {
	if s.m != nil {
		s.m.IncrCounterWithLabels(keyResyncHeld, 1, []metrics.Label{svc(service)})
	}
}

func (s sink) instances(service string, n int) {
	if s.m != nil {
		s.m.SetGaugeWithLabels(keyInstances, float32(n), []metrics.Label{svc(service)})
	}
}

// statusReason is the reason label of an HTTP status.
func statusReason(code int) string { return "http_" + strconv.Itoa(code) }
