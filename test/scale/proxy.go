package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// record is one request the agent sent to Consul, as the proxy saw it.
type record struct {
	path     string
	hasIndex bool
	index    uint64 // index= sent (0 when absent)
	start    time.Time
	end      time.Time // reply headers received from Consul (zero while blocked)
	status   int
	replyIdx uint64 // X-Consul-Index of the reply
	bytes    int64  // reply body bytes relayed so far
}

// changed reports whether the reply carried a new index (a blocking query
// that woke up, or a first read) rather than the index sent (wait expired).
func (r *record) changed() bool {
	return r.status == http.StatusOK && (!r.hasIndex || r.replyIdx != r.index)
}

// phase is a named stretch of the run and the agent's TCP connections to the
// proxy during it.
type phase struct {
	name       string
	start, end time.Time   // end is zero for the current phase
	maxOpen    int         // most connections open at once (those open when it began included)
	opened     int         // connections the agent opened
	openAtEnd  int         // connections open when it ended (the current phase: now)
	statuses   map[int]int // replies to the requests that arrived in it, by status (filled by run)
}

// countingProxy forwards every request to Consul and records it, and counts
// the TCP connections the agent opens to it (http.Server.ConnState).
type countingProxy struct {
	ln  net.Listener
	srv *http.Server

	mu       sync.Mutex
	recs     []*record
	open     int                          // connections open now
	phases   []*phase                     // the last one is current
	upstream map[net.Conn]*http.Transport // per agent connection (perConn)
	// refusedEarly counts net/http's "Unsolicited response received on
	// idle HTTP channel": Consul's connection limit wrote its 429 on a
	// new connection before the request was sent (see logFilter).
	refusedEarly int
}

type recKey struct{}

// startProxy listens on a loopback port and forwards to consulAddr; its
// first phase is "before the agent".
func startProxy(consulAddr string) (*countingProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	target := &url.URL{Scheme: "http", Host: consulAddr}
	p := &countingProxy{ln: ln, phases: []*phase{{name: "before the agent", start: time.Now()}},
		upstream: map[net.Conn]*http.Transport{}}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: perConn{},
		ModifyResponse: func(resp *http.Response) error {
			if r, ok := resp.Request.Context().Value(recKey{}).(*record); ok {
				idx, _ := strconv.ParseUint(resp.Header.Get("X-Consul-Index"), 10, 64)
				p.mu.Lock()
				r.end, r.status, r.replyIdx = time.Now(), resp.StatusCode, idx
				p.mu.Unlock()
				resp.Body = &countingBody{ReadCloser: resp.Body, p: p, r: r}
			}
			if resp.StatusCode == http.StatusTooManyRequests {
				// Consul's connection limit answers 429 and closes the
				// connection: close the agent's too, as talking to
				// Consul directly would.
				resp.Header.Set("Connection", "close")
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if r, ok := req.Context().Value(recKey{}).(*record); ok {
				p.mu.Lock()
				r.end, r.status = time.Now(), http.StatusBadGateway
				p.mu.Unlock()
			}
			// Consul refused or dropped the connection (its connection
			// limit closes new ones, sometimes before the request is
			// read): close the agent's as well.
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			q := req.URL.Query()
			r := &record{path: req.URL.Path, hasIndex: q.Has("index"), start: time.Now()}
			r.index, _ = strconv.ParseUint(q.Get("index"), 10, 64)
			p.mu.Lock()
			p.recs = append(p.recs, r)
			p.mu.Unlock()
			rp.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), recKey{}, r)))
		}),
		ConnState: p.connState,
		// Each connection of the agent gets a connection of its own to
		// Consul (perConn), so that Consul's per-client connection limit
		// sees what it would see without the proxy: a shared pool would
		// dial ahead and park connections, on which Consul's limit
		// answers 429 before any request.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			tr := &http.Transport{
				DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
				MaxConnsPerHost:     1,
				MaxIdleConnsPerHost: 1,
				IdleConnTimeout:     15 * time.Minute,
				DisableCompression:  true, // relay Accept-Encoding and the body as they are
			}
			p.mu.Lock()
			p.upstream[c] = tr
			p.mu.Unlock()
			return context.WithValue(ctx, connKey{}, tr)
		},
	}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// connState counts the agent's connections: StateNew opens one, StateClosed
// (and StateHijacked, which this proxy never does) closes it, and its
// connection to Consul.
func (p *countingProxy) connState(c net.Conn, s http.ConnState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch s {
	case http.StateNew:
		p.open++
		ph := p.phases[len(p.phases)-1]
		ph.opened++
		ph.maxOpen = max(ph.maxOpen, p.open)
	case http.StateClosed, http.StateHijacked:
		p.open--
		if tr := p.upstream[c]; tr != nil {
			tr.CloseIdleConnections()
			delete(p.upstream, c)
		}
	}
}

// connKey is the context key of the agent connection's own transport.
type connKey struct{}

// perConn sends a request over the transport of the agent connection it
// came on (one connection to Consul at most: the agent's HTTP/1.1
// connection carries one request at a time).
type perConn struct{}

func (perConn) RoundTrip(req *http.Request) (*http.Response, error) {
	return req.Context().Value(connKey{}).(*http.Transport).RoundTrip(req)
}

// mark ends the current phase and begins one named name, whose maximum
// starts at the connections open now.
func (p *countingProxy) mark(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	cur := p.phases[len(p.phases)-1]
	cur.end, cur.openAtEnd = now, p.open
	p.phases = append(p.phases, &phase{name: name, start: now, maxOpen: p.open})
}

// phaseList returns copies of the phases so far (the current one with a
// zero end).
func (p *countingProxy) phaseList() []phase {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]phase, len(p.phases))
	for i, ph := range p.phases {
		out[i] = *ph
	}
	out[len(out)-1].openAtEnd = p.open
	return out
}

// openConns returns the agent's connections open now.
func (p *countingProxy) openConns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// countingBody adds the reply bytes relayed to the record.
type countingBody struct {
	io.ReadCloser
	p *countingProxy
	r *record
}

func (b *countingBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	if n > 0 {
		b.p.mu.Lock()
		b.r.bytes += int64(n)
		b.p.mu.Unlock()
	}
	return n, err
}

func (p *countingProxy) addr() string { return p.ln.Addr().String() }

func (p *countingProxy) close() { _ = p.srv.Close() }

// unsolicited is the start of what net/http's Transport logs when a
// connection receives bytes before any request was sent on it.
var unsolicited = []byte("Unsolicited response received on idle HTTP channel")

// logFilter is the standard logger's output during a run: it counts the
// Transport's unsolicited-response lines (thousands of them when Consul's
// connection limit refuses the agent) and passes every other line to next.
type logFilter struct {
	p    *countingProxy
	next io.Writer
}

func (f logFilter) Write(b []byte) (int, error) {
	if bytes.Contains(b, unsolicited) {
		f.p.mu.Lock()
		f.p.refusedEarly++
		f.p.mu.Unlock()
		return len(b), nil
	}
	return f.next.Write(b)
}

// refusedBeforeRequest returns how many connections to Consul got their
// answer before their request (logFilter).
func (p *countingProxy) refusedBeforeRequest() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refusedEarly
}
