package agent

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-metrics"
	gmprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// metricStaleness is the age of the last successful Consul query per
// service, sampled every second by the agent.
var metricStaleness = []string{"discovery", "last_success_age"}

// metricsPrefix is the go-metrics service name: every key is emitted as
// impulse.<key> (Prometheus: impulse_<key>).
const metricsPrefix = "impulse"

// telemetry owns the go-metrics instance and its sinks.
type telemetry struct {
	metrics *metrics.Metrics
	handler http.Handler // Prometheus text on /metrics
	// statsd and dogstatsd are the statsd and DogStatsD sinks, nil when
	// off: close flushes them.
	statsd    *statsdSink
	dogstatsd *dogStatsdSink
}

// close flushes the statsd and DogStatsD sinks and stops their goroutines;
// metrics emitted later are dropped. The Prometheus endpoint keeps its
// values. Safe on nil and twice.
func (t *telemetry) close() {
	if t == nil {
		return
	}
	if t.statsd != nil {
		t.statsd.Shutdown()
	}
	if t.dogstatsd != nil {
		t.dogstatsd.Shutdown()
	}
}

// newTelemetry builds go-metrics with a Prometheus sink on a private registry,
// plus a statsd (statsd.go) and a DogStatsD sink (dogstatsd.go) when
// configured. Metric
// definitions come from the packages that emit them, prefixed here.
func newTelemetry(t hcl.Telemetry) (*telemetry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	retention := t.PrometheusRetention
	if retention <= 0 {
		retention = hcl.DefaultPrometheusRetention
	}
	opts := gmprom.PrometheusOpts{Expiration: retention, Registerer: reg}
	gauges := append(append([]gmprom.GaugeDefinition(nil), gateway.GaugeDefinitions...), discovery.Gauges...)
	gauges = append(gauges, gmprom.GaugeDefinition{Name: metricStaleness,
		Help: "Seconds since the last successful Consul query of a watched service (label service); compare with consul.max_staleness."})
	for _, d := range gauges {
		d.Name = prefixed(d.Name)
		opts.GaugeDefinitions = append(opts.GaugeDefinitions, d)
	}
	for _, d := range append(append([]gmprom.CounterDefinition(nil), gateway.CounterDefinitions...), discovery.Counters...) {
		d.Name = prefixed(d.Name)
		opts.CounterDefinitions = append(opts.CounterDefinitions, d)
	}
	for _, d := range append(append([]gmprom.SummaryDefinition(nil), gateway.SummaryDefinitions...), discovery.Summaries...) {
		d.Name = prefixed(d.Name)
		opts.SummaryDefinitions = append(opts.SummaryDefinitions, d)
	}
	prom, err := gmprom.NewPrometheusSinkFrom(opts)
	if err != nil {
		return nil, fmt.Errorf("agent: prometheus sink: %w", err)
	}
	tel := &telemetry{handler: promhttp.HandlerFor(labelledOnly{reg}, promhttp.HandlerOpts{})}
	cfg := metrics.DefaultConfig(metricsPrefix)
	// The host is never part of a name (README "DogStatsD"): go-metrics'
	// EnableHostname would prefix gauge names with it in every sink
	// (impulse_<host>_upstream_in_flight on /metrics). disable_hostname =
	// false adds a host tag in the DogStatsD sink only; Prometheus has
	// the scrape's instance label.
	cfg.EnableHostname = false
	cfg.EnableHostnameLabel = false
	cfg.EnableRuntimeMetrics = false // the Go collector covers the runtime
	cfg.TimerGranularity = time.Millisecond
	sinks := metrics.FanoutSink{prom}
	if t.StatsdAddress != "" {
		tel.statsd = newStatsdSink(t.StatsdAddress, statsdFlushInterval) // statsd.go
		sinks = append(sinks, tel.statsd)
	}
	if t.DogstatsdAddress != "" {
		host := cfg.HostName
		if t.DisableHostname {
			host = ""
		}
		s, err := newDogStatsdSink(t.DogstatsdAddress, t.DogstatsdTags, host)
		if err != nil {
			// hcl resolved the name already (dogstatsd.go there); it can
			// stop resolving since: the same error at the address.
			return nil, configErr(t.DogstatsdAddressRange, "Cannot reach DogStatsD address", "telemetry dogstatsd_address", err)
		}
		sinks, tel.dogstatsd = append(sinks, s), s
	}
	m, err := metrics.New(cfg, sinks)
	if err != nil {
		tel.close()
		return nil, fmt.Errorf("agent: metrics: %w", err)
	}
	tel.metrics = m
	return tel, nil
}

// labelledOnly drops the unlabelled series go-metrics' Prometheus sink adds
// for every metric definition (value 0, never updated) from the impulse_
// families that carry labels: beside the real series it would read as a
// zero-valued upstream, e.g. impulse_upstream_backends_eligible 0 firing
// an "== 0" alert for ever. The families without labels
// (gateway.UnlabelledMetrics) keep theirs: it is the real series.
type labelledOnly struct{ prometheus.Gatherer }

// unlabelled are the Prometheus names of gateway.UnlabelledMetrics.
var unlabelled = func() map[string]bool {
	m := map[string]bool{}
	for _, name := range gateway.UnlabelledMetrics {
		m[strings.Join(prefixed(name), "_")] = true
	}
	return m
}()

func (g labelledOnly) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := g.Gatherer.Gather()
	out := mfs[:0]
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), metricsPrefix+"_") && !unlabelled[mf.GetName()] {
			ms := mf.Metric[:0]
			for _, m := range mf.Metric {
				if len(m.Label) > 0 {
					ms = append(ms, m)
				}
			}
			if len(ms) == 0 {
				continue
			}
			mf.Metric = ms
		}
		out = append(out, mf)
	}
	return out, err
}

func prefixed(name []string) []string { return append([]string{metricsPrefix}, name...) }
