package agent

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-metrics"
)

// Flushing of the statsd sink, as go-metrics' StatsdSink: every 100 ms, and
// whenever a datagram would grow past 1400 bytes (it fits an Ethernet MTU).
const (
	statsdFlushInterval = 100 * time.Millisecond
	statsdMaxDatagram   = 1400
	statsdRedial        = 5 * time.Second // after a failed lookup of the address
)

// statsdSink sends metrics to a statsd daemon over UDP in the plain statsd
// line format, several lines per datagram, as go-metrics' StatsdSink does:
// the key and the values of its labels joined by dots, the value with six
// decimals, type c (counter), g (gauge), ms (sample) or kv (EmitKey), e.g.
// impulse.requests.public.h3.web.2xx:1.000000|c. Unlike go-metrics' sink:
//
//   - a label with an empty value (the reason of an ordinary request, the
//     upstream of a request with no route) is left out of the name instead
//     of leaving an empty element ("web.2xx." or "h3..4xx"), as the
//     DogStatsD sink leaves it out of its tags;
//   - a label value is one element of the name: its dots become '_' (the
//     histogram bucket le="2.5" is ...2xx.2_5, not two elements);
//   - ':', '|', whitespace and line breaks become '_' (go-metrics maps ':'
//     and ' ' only), so no label value breaks the line format;
//   - Shutdown sends what is buffered and stops the flushing goroutine, and
//     metrics after it are dropped (go-metrics' sink keeps its goroutine for
//     ever, loses its last 100 ms, and panics on a metric after Shutdown).
//
// The address is resolved when the sink is made and, while it does not
// resolve, again every 5 s; metrics meanwhile are dropped, as UDP drops
// them while no daemon listens.
type statsdSink struct {
	addr  string
	every time.Duration // flush interval
	stop  chan struct{}
	done  chan struct{}

	mu     sync.Mutex
	conn   net.Conn // nil while addr does not resolve
	buf    []byte
	closed bool
}

var (
	_ metrics.ShutdownSink             = (*statsdSink)(nil)
	_ metrics.PrecisionGaugeMetricSink = (*statsdSink)(nil)
)

// newStatsdSink starts a sink sending to addr (host:port) every flush
// (statsdFlushInterval).
func newStatsdSink(addr string, flush time.Duration) *statsdSink {
	s := &statsdSink{addr: addr, every: flush, stop: make(chan struct{}), done: make(chan struct{})}
	s.conn, _ = net.Dial("udp", addr) // a failed lookup is retried by run
	go s.run()
	return s
}

// run flushes every s.every and dials again while the address
// does not resolve, until Shutdown.
func (s *statsdSink) run() {
	defer close(s.done)
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	var redialAt time.Time
	for {
		select {
		case <-s.stop:
			return
		case now := <-tick.C:
			s.mu.Lock()
			missing := s.conn == nil
			s.mu.Unlock()
			if missing && now.After(redialAt) {
				// Outside the lock: a lookup may take seconds, and the
				// request path emits metrics.
				c, err := net.Dial("udp", s.addr)
				redialAt = now.Add(statsdRedial)
				s.mu.Lock()
				if err == nil && !s.closed {
					s.conn, c = c, nil
				}
				s.mu.Unlock()
				if c != nil {
					c.Close()
				}
			}
			s.mu.Lock()
			s.flushLocked()
			s.mu.Unlock()
		}
	}
}

// flushLocked sends the buffered lines as one datagram. A write error (no
// daemon listening: ECONNREFUSED from an earlier datagram's ICMP) loses the
// datagram, as UDP would have.
func (s *statsdSink) flushLocked() {
	if len(s.buf) == 0 {
		return
	}
	if s.conn != nil {
		_, _ = s.conn.Write(s.buf)
	}
	s.buf = s.buf[:0]
}

// push appends one line.
func (s *statsdSink) push(key []string, labels []metrics.Label, val float64, typ string) {
	var b strings.Builder
	for _, k := range key {
		writeStatsdPart(&b, k, false)
	}
	for _, l := range labels {
		if l.Value != "" {
			writeStatsdPart(&b, l.Value, true)
		}
	}
	b.WriteByte(':')
	b.WriteString(strconv.FormatFloat(val, 'f', 6, 64))
	b.WriteByte('|')
	b.WriteString(typ)
	b.WriteByte('\n')
	line := b.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if len(s.buf)+len(line) > statsdMaxDatagram {
		s.flushLocked()
	}
	s.buf = append(s.buf, line...)
}

// writeStatsdPart writes "." (but before the first part) and p with the
// characters that would break a statsd line replaced by '_', and its dots
// too when it is a label value (one element).
func writeStatsdPart(b *strings.Builder, p string, label bool) {
	if b.Len() > 0 {
		b.WriteByte('.')
	}
	for _, r := range p {
		switch {
		case r == ':', r == '|', r == ' ', r == '\t', r == '\n', r == '\r', r == '.' && label:
			r = '_'
		}
		b.WriteRune(r)
	}
}

// SetGauge implements metrics.MetricSink.
func (s *statsdSink) SetGauge(key []string, val float32) { s.push(key, nil, float64(val), "g") }

// SetGaugeWithLabels implements metrics.MetricSink.
func (s *statsdSink) SetGaugeWithLabels(key []string, val float32, labels []metrics.Label) {
	s.push(key, labels, float64(val), "g")
}

// SetPrecisionGauge implements metrics.PrecisionGaugeMetricSink.
func (s *statsdSink) SetPrecisionGauge(key []string, val float64) { s.push(key, nil, val, "g") }

// SetPrecisionGaugeWithLabels implements metrics.PrecisionGaugeMetricSink.
func (s *statsdSink) SetPrecisionGaugeWithLabels(key []string, val float64, labels []metrics.Label) {
	s.push(key, labels, val, "g")
}

// EmitKey implements metrics.MetricSink.
func (s *statsdSink) EmitKey(key []string, val float32) { s.push(key, nil, float64(val), "kv") }

// IncrCounter implements metrics.MetricSink.
func (s *statsdSink) IncrCounter(key []string, val float32) { s.push(key, nil, float64(val), "c") }

// IncrCounterWithLabels implements metrics.MetricSink.
func (s *statsdSink) IncrCounterWithLabels(key []string, val float32, labels []metrics.Label) {
	s.push(key, labels, float64(val), "c")
}

// AddSample implements metrics.MetricSink.
func (s *statsdSink) AddSample(key []string, val float32) { s.push(key, nil, float64(val), "ms") }

// AddSampleWithLabels implements metrics.MetricSink.
func (s *statsdSink) AddSampleWithLabels(key []string, val float32, labels []metrics.Label) {
	s.push(key, labels, float64(val), "ms")
}

// Shutdown sends what is buffered, stops the flushing goroutine and closes
// the socket; later metrics are dropped. Safe to call twice.
func (s *statsdSink) Shutdown() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.flushLocked()
	if s.conn != nil {
		s.conn.Close()
	}
	s.mu.Unlock()
	close(s.stop)
	<-s.done
}
