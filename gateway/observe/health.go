package observe

import "github.com/hashicorp/go-metrics/prometheus"

// metricHealthTransitions is impulse_backend_health_transitions{upstream,kind,to}.
var metricHealthTransitions = []string{"backend", "health", "transitions"}

var healthCounters = []prometheus.CounterDefinition{
	{Name: metricHealthTransitions, Help: "Backend health transitions, by upstream, kind (health, ejected, returned) and resulting active status."},
}

// HealthTransition counts one backend health transition of upstream: kind
// is health, ejected, returned (or a DNS outcome), to the active status
// after it.
func (gm *Metrics) HealthTransition(upstream, kind, to string) {
	gm.m.IncrCounterWithLabels(metricHealthTransitions, 1, labels("upstream", upstream, "kind", kind, "to", to))
}
