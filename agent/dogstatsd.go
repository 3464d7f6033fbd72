package agent

import (
	"github.com/hashicorp/go-metrics"
	"github.com/hashicorp/go-metrics/datadog"
)

// dogStatsdSink is go-metrics' DataDog sink (github.com/DataDog/datadog-go
// over UDP) with the labels of a series as tags ("upstream:web",
// "listener:public") and, when host is set (disable_hostname = false), the
// host as a "host" tag, never in the name:
// impulse.requests:1|c|#listener:public,upstream:web,code:2xx,host:edge-1.
// Labels with an empty value (the reason of an ordinary request, the
// upstream of a request with no route) are left out rather than sent as a
// bare "reason" tag. Counters are "c", gauges "g", timers (MeasureSince,
// AddSample) "ms"; the request duration histogram arrives as the counters
// impulse.request.duration.bucket (tag le, ms), .sum (ms) and .count.
type dogStatsdSink struct {
	*datadog.DogStatsdSink
	host string // "" = no host tag
}

// newDogStatsdSink connects to a DogStatsD agent at addr (host:port, UDP:
// the name is resolved now, an unresolvable host is an error). tags go on
// every metric; host, when not "", as a "host" tag. The host tag is added
// here rather than by the DataDog sink's hostname propagation: that one
// also splices any key element equal to the hostname out of the name (a
// host called "upstream" would rename impulse.upstream.in_flight).
func newDogStatsdSink(addr string, tags []string, host string) (*dogStatsdSink, error) {
	s, err := datadog.NewDogStatsdSink(addr, "")
	if err != nil {
		return nil, err
	}
	if len(tags) > 0 {
		s.SetTags(append([]string(nil), tags...))
	}
	return &dogStatsdSink{DogStatsdSink: s, host: host}, nil
}

// labels returns labels without those whose value is empty, plus the host
// label when s has one; it shares the backing array only when it adds and
// drops nothing (other sinks read labels).
func (s *dogStatsdSink) labels(labels []metrics.Label) []metrics.Label {
	labels = nonEmpty(labels)
	if s.host == "" {
		return labels
	}
	return append(labels[:len(labels):len(labels)], metrics.Label{Name: "host", Value: s.host})
}

// nonEmpty returns labels without those whose value is empty, sharing the
// backing array only when nothing is dropped (other sinks read labels).
func nonEmpty(labels []metrics.Label) []metrics.Label {
	for i, l := range labels {
		if l.Value != "" {
			continue
		}
		out := append(make([]metrics.Label, 0, len(labels)-1), labels[:i]...)
		for _, l := range labels[i+1:] {
			if l.Value != "" {
				out = append(out, l)
			}
		}
		return out
	}
	return labels
}

func (s *dogStatsdSink) SetGaugeWithLabels(key []string, val float32, labels []metrics.Label) {
	s.DogStatsdSink.SetGaugeWithLabels(key, val, s.labels(labels))
}

func (s *dogStatsdSink) SetPrecisionGaugeWithLabels(key []string, val float64, labels []metrics.Label) {
	s.DogStatsdSink.SetPrecisionGaugeWithLabels(key, val, s.labels(labels))
}

func (s *dogStatsdSink) IncrCounterWithLabels(key []string, val float32, labels []metrics.Label) {
	s.DogStatsdSink.IncrCounterWithLabels(key, val, s.labels(labels))
}

func (s *dogStatsdSink) AddSampleWithLabels(key []string, val float32, labels []metrics.Label) {
	s.DogStatsdSink.AddSampleWithLabels(key, val, s.labels(labels))
}

// The unlabelled methods too: the embedded ones would bypass s.labels.

func (s *dogStatsdSink) SetGauge(key []string, val float32) { s.SetGaugeWithLabels(key, val, nil) }

func (s *dogStatsdSink) SetPrecisionGauge(key []string, val float64) {
	s.SetPrecisionGaugeWithLabels(key, val, nil)
}

func (s *dogStatsdSink) IncrCounter(key []string, val float32) {
	s.IncrCounterWithLabels(key, val, nil)
}

func (s *dogStatsdSink) AddSample(key []string, val float32) { s.AddSampleWithLabels(key, val, nil) }
