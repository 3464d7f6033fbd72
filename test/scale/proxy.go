package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
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
}

// changed reports whether the reply carried a new index (a blocking query
// that woke up, or a first read) rather than the index sent (wait expired).
func (r *record) changed() bool {
	return r.status == http.StatusOK && (!r.hasIndex || r.replyIdx != r.index)
}

// countingProxy forwards every request to Consul and records it.
type countingProxy struct {
	ln  net.Listener
	srv *http.Server

	mu   sync.Mutex
	recs []*record
}

type recKey struct{}

func startProxy(consulAddr string) (*countingProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	target := &url.URL{Scheme: "http", Host: consulAddr}
	p := &countingProxy{ln: ln}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		// One connection per outstanding blocking query; keep them all
		// reusable so the proxy adds no connection churn.
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConns:        0,
			MaxIdleConnsPerHost: 8192,
			IdleConnTimeout:     15 * time.Minute,
		},
		ModifyResponse: func(resp *http.Response) error {
			if r, ok := resp.Request.Context().Value(recKey{}).(*record); ok {
				idx, _ := strconv.ParseUint(resp.Header.Get("X-Consul-Index"), 10, 64)
				p.mu.Lock()
				r.end, r.status, r.replyIdx = time.Now(), resp.StatusCode, idx
				p.mu.Unlock()
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if r, ok := req.Context().Value(recKey{}).(*record); ok {
				p.mu.Lock()
				r.end, r.status = time.Now(), http.StatusBadGateway
				p.mu.Unlock()
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		r := &record{path: req.URL.Path, hasIndex: q.Has("index"), start: time.Now()}
		r.index, _ = strconv.ParseUint(q.Get("index"), 10, 64)
		p.mu.Lock()
		p.recs = append(p.recs, r)
		p.mu.Unlock()
		rp.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), recKey{}, r)))
	})}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *countingProxy) addr() string { return p.ln.Addr().String() }

func (p *countingProxy) close() { _ = p.srv.Close() }

// snapshot returns copies of the records whose request arrived in [from, to).
func (p *countingProxy) snapshot(from, to time.Time) []record {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []record
	for _, r := range p.recs {
		if !r.start.Before(from) && r.start.Before(to) {
			out = append(out, *r)
		}
	}
	return out
}

// firstChange returns the reply time of the first changed reply for path
// that arrived at or after t, or the zero time.
func (p *countingProxy) firstChange(path string, t time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best time.Time
	for _, r := range p.recs {
		if r.path == path && r.hasIndex && !r.end.IsZero() && !r.end.Before(t) && r.changed() {
			if best.IsZero() || r.end.Before(best) {
				best = r.end
			}
		}
	}
	return best
}

// requestSummary describes a set of records.
type requestSummary struct {
	total, withIndex, changed, expired, failed int
	healthService                              int // /v1/health/service/...
	other                                      map[string]int
	watches                                    int // distinct paths
	// withoutIndexAfterFirst counts requests lacking index= on a path that
	// had already been queried (in all records, not only these).
	withoutIndexAfterFirst int
	// Why each request was sent, from the reply to the previous request of
	// the same watch (path): a changed reply, an expired wait, a failure,
	// or none (the watch's first request).
	afterChange, afterExpiry, afterFailure, first int
}

func (p *countingProxy) summarize(from, to time.Time) requestSummary {
	p.mu.Lock()
	prev := map[string]*record{}
	s := requestSummary{other: map[string]int{}}
	paths := map[string]bool{}
	for _, r := range p.recs {
		in := !r.start.Before(from) && r.start.Before(to)
		if in {
			s.total++
			paths[r.path] = true
			if r.hasIndex {
				s.withIndex++
			}
			switch {
			case r.end.IsZero():
				// still blocked: neither changed nor expired yet
			case r.status != http.StatusOK:
				s.failed++
			case r.changed():
				s.changed++
			default:
				s.expired++
			}
			if strings.HasPrefix(r.path, "/v1/health/service/") {
				s.healthService++
			} else {
				s.other[r.path]++
			}
			pr := prev[r.path]
			switch {
			case pr == nil:
				s.first++
			case pr.status != http.StatusOK:
				s.afterFailure++
			case pr.changed():
				s.afterChange++
			default:
				s.afterExpiry++
			}
			if pr != nil && !r.hasIndex {
				s.withoutIndexAfterFirst++
			}
		}
		prev[r.path] = r
	}
	p.mu.Unlock()
	s.watches = len(paths)
	return s
}

// statuses counts the replies by HTTP status (0: still blocked).
func (p *countingProxy) statuses() map[int]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[int]int{}
	for _, r := range p.recs {
		out[r.status]++
	}
	return out
}
