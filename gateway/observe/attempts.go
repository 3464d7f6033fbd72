package observe

import "github.com/hashicorp/go-metrics/prometheus"

// Retry and hedge counters: impulse_retries{upstream,reason},
// impulse_retries_budget_exhausted{upstream}, impulse_hedges{upstream},
// impulse_hedges_won{upstream}.
var (
	metricRetries         = []string{"retries"}
	metricBudgetExhausted = []string{"retries", "budget", "exhausted"}
	metricHedges          = []string{"hedges"}
	metricHedgesWon       = []string{"hedges", "won"}
)

var attemptCounters = []prometheus.CounterDefinition{
	{Name: metricRetries, Help: "Requests sent again to another backend, by upstream and reason (the retry condition: connect-failure, refused-stream, reset, 502, 503, 504)."},
	{Name: metricBudgetExhausted, Help: "Retries and hedges not sent because the upstream's retry budget was spent, by upstream."},
	{Name: metricHedges, Help: "Hedged copies of slow requests sent, by upstream."},
	{Name: metricHedgesWon, Help: "Hedged copies whose answer was relayed (the first answer), by upstream."},
}

// AttemptCounter names one of the retry and hedge counters.
type AttemptCounter uint8

// The counters: Retried (impulse_retries), BudgetExhausted, Hedged,
// HedgeWon.
const (
	Retried AttemptCounter = iota
	BudgetExhausted
	Hedged
	HedgeWon
)

var attemptMetrics = [...][]string{metricRetries, metricBudgetExhausted, metricHedges, metricHedgesWon}

// attemptKey is one retry or hedge series; reason only for Retried.
type attemptKey struct {
	counter  AttemptCounter
	upstream string
	reason   string
}

func (k attemptKey) upstreamName() string { return k.upstream }

func (k attemptKey) emit(gm *Metrics, d uint64) {
	l := labels("upstream", k.upstream)
	if k.counter == Retried {
		l = append(l, labelOf("reason", k.reason))
	}
	gm.m.IncrCounterWithLabels(attemptMetrics[k.counter], float32(d), l)
}

// Retry counts a retry sent to another backend of upstream; reason is the
// retry condition.
func (gm *Metrics) Retry(upstream, reason string) {
	add(&gm.attempts, attemptKey{Retried, upstream, reason})
}

// RetryBudgetExhausted counts a retry or hedge the budget refused.
func (gm *Metrics) RetryBudgetExhausted(upstream string) {
	add(&gm.attempts, attemptKey{BudgetExhausted, upstream, ""})
}

// Hedge counts a hedged copy sent; won, one whose answer was relayed.
func (gm *Metrics) Hedge(upstream string, won bool) {
	k := attemptKey{Hedged, upstream, ""}
	if won {
		k.counter = HedgeWon
	}
	add(&gm.attempts, k)
}

// Attempts is the total of counter for upstream (reason: Retried only).
func (gm *Metrics) Attempts(counter AttemptCounter, upstream, reason string) uint64 {
	return load(&gm.attempts, attemptKey{counter, upstream, reason})
}
