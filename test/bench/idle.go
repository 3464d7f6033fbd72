package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// IdleConfig describes an idle-connection run: N HTTP/3 connections, each
// on its own UDP socket, each completing one GET of URL (so the server has
// built its HTTP/3 connection state, and a proxy its backend path) and then
// held open with QUIC keep-alives.
type IdleConfig struct {
	URL         string
	N           int
	Concurrency int // connections being established at once
	CACert      string
	Insecure    bool
	Timeout     time.Duration // per connection: dial plus the GET
}

// IdleConns is a set of open idle connections.
type IdleConns struct {
	transports []*http3.Transport
	Open       int
	Failed     int
	FirstErr   error
}

// Close closes every connection.
func (ic *IdleConns) Close() {
	for _, tr := range ic.transports {
		_ = tr.Close()
	}
}

// OpenIdle establishes the connections of cfg.
func OpenIdle(ctx context.Context, cfg IdleConfig) (*IdleConns, error) {
	tc, err := clientTLS(&LoadConfig{CACert: cfg.CACert, Insecure: cfg.Insecure})
	if err != nil {
		return nil, err
	}
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 50
	}
	ic := &IdleConns{transports: make([]*http3.Transport, cfg.N)}
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.N || ctx.Err() != nil {
					return
				}
				tr := &http3.Transport{
					TLSClientConfig:    tc,
					DisableCompression: true,
					QUICConfig: &quic.Config{
						MaxIdleTimeout:  60 * time.Second,
						KeepAlivePeriod: 10 * time.Second,
					},
				}
				err := idleGet(ctx, tr, cfg.URL, cfg.Timeout)
				mu.Lock()
				ic.transports[i] = tr
				if err != nil {
					ic.Failed++
					if ic.FirstErr == nil {
						ic.FirstErr = err
					}
				} else {
					ic.Open++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ic, ctx.Err()
}

// idleGet performs one GET on tr and drains the body.
func idleGet(ctx context.Context, tr *http3.Transport, url string, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return statusError{resp.StatusCode}
	}
	return nil
}

// runIdle is the `idle` subcommand: it opens the connections, prints
// {"open":N,"failed":F} on stdout and holds them for -hold (0: until
// SIGINT/SIGTERM).
func runIdle(args []string) error {
	fs := flag.NewFlagSet("idle", flag.ContinueOnError)
	var cfg IdleConfig
	fs.StringVar(&cfg.URL, "url", "", "HTTPS URL fetched once on every connection (e.g. https://127.0.0.1:8443/small)")
	fs.IntVar(&cfg.N, "n", 1000, "connections")
	fs.IntVar(&cfg.Concurrency, "concurrency", 50, "handshakes in progress at once")
	fs.StringVar(&cfg.CACert, "cacert", "", "PEM certificate to trust")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "skip certificate verification")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Second, "per-connection dial+GET timeout")
	hold := fs.Duration("hold", 0, "how long to hold the connections (0: until a signal)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.URL == "" && fs.NArg() == 1 {
		cfg.URL = fs.Arg(0)
	}
	if cfg.URL == "" {
		return fmt.Errorf("idle: -url is required")
	}
	start := time.Now()
	ic, err := OpenIdle(context.Background(), cfg)
	if err != nil {
		return err
	}
	defer ic.Close()
	msg := fmt.Sprintf(`{"open":%d,"failed":%d,"seconds":%.2f}`, ic.Open, ic.Failed, time.Since(start).Seconds())
	fmt.Println(msg)
	if ic.FirstErr != nil {
		fmt.Fprintf(os.Stderr, "idle: first error: %v\n", ic.FirstErr)
	}
	if *hold > 0 {
		select {
		case <-time.After(*hold):
		case <-signalled():
		}
	} else {
		<-signalled()
	}
	return nil
}
