package agent

import (
	"github.com/hashicorp/go-metrics"
	"github.com/hashicorp/go-metrics/datadog"
)

// dogStatsdSink is go-metrics' DataDog sink (github.com/DataDog/datadog-go
// over UDP) with the labels of a series as tags ("upstream:web",
// "listener:public") and the host as a "host" tag, never in the name:
// impulse.requests:1|c|#listener:public,upstream:web,code:2xx. Labels with
// an empty value (the reason of an ordinary request, the upstream of a
// request with no route) are left out rather than sent as a bare "reason"
// tag. Counters are "c", gauges "g", timers (MeasureSince, AddSample) "ms";
// the request duration histogram arrives as the counters
// impulse.request.duration.bucket (tag le, ms), .sum (ms) and .count.
type dogStatsdSink struct {
	*datadog.DogStatsdSink
}

// newDogStatsdSink connects to a DogStatsD agent at addr (host:port, UDP:
// the name is resolved now, an unresolvable host is an error). tags go on
// every metric. hostname is go-metrics' HostName: with hostTag it is sent
// as a "host" tag; either way it is spliced out of the metric name.
func newDogStatsdSink(addr string, tags []string, hostname string, hostTag bool) (*dogStatsdSink, error) {
	s, err := datadog.NewDogStatsdSink(addr, hostname)
	if err != nil {
		return nil, err
	}
	if len(tags) > 0 {
		s.SetTags(append([]string(nil), tags...))
	}
	if hostTag {
		s.EnableHostNamePropagation()
	}
	return &dogStatsdSink{s}, nil
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
	s.DogStatsdSink.SetGaugeWithLabels(key, val, nonEmpty(labels))
}

func (s *dogStatsdSink) SetPrecisionGaugeWithLabels(key []string, val float64, labels []metrics.Label) {
	s.DogStatsdSink.SetPrecisionGaugeWithLabels(key, val, nonEmpty(labels))
}

func (s *dogStatsdSink) IncrCounterWithLabels(key []string, val float32, labels []metrics.Label) {
	s.DogStatsdSink.IncrCounterWithLabels(key, val, nonEmpty(labels))
}

func (s *dogStatsdSink) AddSampleWithLabels(key []string, val float32, labels []metrics.Label) {
	s.DogStatsdSink.AddSampleWithLabels(key, val, nonEmpty(labels))
}
