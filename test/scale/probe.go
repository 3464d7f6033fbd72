package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/quic-go/quic-go/http3"
)

func serviceName(i int) string { return fmt.Sprintf("svc%03d", i) }

// instanceID is the Consul service ID of instance k of service i.
func instanceID(i, k int) string { return fmt.Sprintf("%s-%d", serviceName(i), k) }

// backends is one HTTP/1.1 server listening on one loopback port per
// instance index; every instance k of every service points at port k, and
// the answer names k in X-Instance (the service is the Host).
type backends struct {
	srv   *http.Server
	ports []int
}

func startBackends(n int) (*backends, error) {
	b := &backends{}
	byPort := map[int]string{}
	var lns []net.Listener
	for k := range n {
		ln, err := freeTCP()
		if err != nil {
			return nil, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		b.ports = append(b.ports, p)
		byPort[p] = strconv.Itoa(k)
		lns = append(lns, ln)
	}
	b.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		if ta, ok := la.(*net.TCPAddr); ok {
			w.Header().Set("X-Instance", byPort[ta.Port])
		}
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	}), ReadHeaderTimeout: 10 * time.Second}
	for _, ln := range lns {
		go func() { _ = b.srv.Serve(ln) }()
	}
	return b, nil
}

func (b *backends) close() { _ = b.srv.Close() }

// prober sends HTTP/3 requests to the agent's listener.
type prober struct {
	base   string // https://127.0.0.1:PORT/
	tr     *http3.Transport
	client *http.Client
}

func newProber(listenAddr string, roots *x509.CertPool) *prober {
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableCompression: true}
	return &prober{base: "https://" + listenAddr + "/", tr: tr, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

func (p *prober) close() { _ = p.tr.Close() }

// answer is one probe request's outcome.
type answer struct {
	sent     time.Time
	rtt      time.Duration
	status   int
	instance int    // -1 when the answer named no instance
	reason   string // x-impulse-error
	err      error
}

// get sends GET / with Host svc.test.
func (p *prober) get(ctx context.Context, svc string) answer {
	a := answer{sent: time.Now(), instance: -1}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.base, nil)
	req.Host = svc + ".test"
	resp, err := p.client.Do(req)
	if err != nil {
		a.err = err
		a.rtt = time.Since(a.sent)
		return a
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	a.rtt = time.Since(a.sent)
	a.status = resp.StatusCode
	a.reason = resp.Header.Get("X-Impulse-Error")
	if v := resp.Header.Get("X-Instance"); v != "" {
		a.instance, _ = strconv.Atoi(v)
	}
	return a
}

// flipResult is one check flip and its measured convergence.
type flipResult struct {
	svc, inst   int
	toPassing   bool
	remaining   int       // passing instances of the service after the flip
	t0, t1      time.Time // API call sent / returned
	converged   time.Time // zero when the routing never followed
	consulReply time.Time // first reply on the service's path carrying the change, through the proxy, after t0
	probes      int       // probe requests sent
	rtts        []time.Duration
	errors      int
}

// measure probes service f.svc until the routing reflects the flip or the
// deadline passes; see the package comment for the rule.
func (p *prober) measure(ctx context.Context, f *flipResult, interval time.Duration) {
	svc := serviceName(f.svc)
	window := 2 * (f.remaining + 1)
	run := 0
	var runStart time.Time
	next := time.Now()
	for ctx.Err() == nil {
		a := p.get(ctx, svc)
		f.probes++
		if a.err != nil {
			f.errors++
		} else {
			f.rtts = append(f.rtts, a.rtt)
			switch {
			case f.toPassing:
				if a.status == http.StatusOK && a.instance == f.inst {
					f.converged = a.sent
					return
				}
			case f.remaining == 0:
				if a.status == http.StatusServiceUnavailable {
					f.converged = a.sent
					return
				}
			default:
				if a.status == http.StatusOK && a.instance != f.inst {
					if run == 0 {
						runStart = a.sent
					}
					if run++; run >= window {
						f.converged = runStart
						return
					}
				} else {
					run = 0
				}
			}
		}
		next = next.Add(interval)
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		} else {
			next = time.Now()
		}
	}
}
