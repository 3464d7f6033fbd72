package gateway

import (
	"time"

	"github.com/hashicorp/go-metrics"
)

// Retry and hedge metric keys (see metrics.go for the others).
var (
	metricRetries         = []string{"retries"}
	metricBudgetExhausted = []string{"retries", "budget", "exhausted"}
	metricHedges          = []string{"hedges"}
	metricHedgesWon       = []string{"hedges", "won"}
)

// attemptKey is one retry or hedge counter: which metric, the upstream and,
// for impulse_retries, the reason (the `on` condition that triggered it).
type attemptKey struct {
	metric   uint8 // index into attemptMetrics
	upstream string
	reason   string
}

// attemptMetrics are the counters attemptKey.metric indexes.
var attemptMetrics = [...][]string{metricRetries, metricBudgetExhausted, metricHedges, metricHedgesWon}

const (
	countRetry uint8 = iota
	countBudgetExhausted
	countHedge
	countHedgeWon
)

// attemptCount is one attemptKey's count, the part flushed, and when it
// was last handed to go-metrics (flushMu guards touched).
type attemptCount = flushedCount

// count adds one to key's counter: an atomic add once the key exists. Only
// retries and hedges pay for it.
func (gm *gatewayMetrics) count(key attemptKey) {
	c, ok := gm.attemptCounts.Load(key)
	if !ok {
		c, _ = gm.attemptCounts.LoadOrStore(key, new(attemptCount))
	}
	c.(*attemptCount).n.Add(1)
}

// retry counts a retry sent to another backend of upstream, reason being
// the condition (impulse_retries{upstream,reason}).
func (gm *gatewayMetrics) retry(upstream, reason string) {
	gm.count(attemptKey{countRetry, upstream, reason})
}

// retryBudgetExhausted counts a retry or hedge the budget refused
// (impulse_retries_budget_exhausted{upstream}).
func (gm *gatewayMetrics) retryBudgetExhausted(upstream string) {
	gm.count(attemptKey{countBudgetExhausted, upstream, ""})
}

// hedge counts a hedged copy sent (impulse_hedges{upstream}); won, one
// whose answer was relayed (impulse_hedges_won{upstream}).
func (gm *gatewayMetrics) hedge(upstream string, won bool) {
	k := attemptKey{countHedge, upstream, ""}
	if won {
		k.metric = countHedgeWon
	}
	gm.count(k)
}

// flushAttempts hands the counts since the last flush to go-metrics,
// keeping idle series of live upstreams alive and forgetting those of
// removed ones as flush does. flushMu is held.
func (gm *gatewayMetrics) flushAttempts(now time.Time, live func(upstream string) bool) {
	gm.attemptCounts.Range(func(k, v any) bool {
		key, c := k.(attemptKey), v.(*attemptCount)
		d, emit, forget := c.due(now, live(key.upstream))
		if forget {
			gm.attemptCounts.Delete(k)
		}
		if !emit {
			return true
		}
		labels := []metrics.Label{{Name: "upstream", Value: key.upstream}}
		if key.metric == countRetry {
			labels = append(labels, metrics.Label{Name: "reason", Value: key.reason})
		}
		gm.m.IncrCounterWithLabels(attemptMetrics[key.metric], float32(d), labels)
		return true
	})
}
