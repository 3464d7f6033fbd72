package ingress

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"go.uber.org/goleak"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// handlerPipeline is a Pipeline that hands each request to an
// http.Handler, or gives the adapter's refusal: the ingress tests' stand-in
// for the gateway's pipeline, whose own tests run over real listeners.
type handlerPipeline struct{ h http.Handler }

func (p handlerPipeline) Serve(_ string, w http.ResponseWriter, r *http.Request, refused answer.Answer) {
	if refused.Status != 0 {
		w.WriteHeader(refused.Status)
		return
	}
	p.h.ServeHTTP(w, r)
}

// harness is one running listener on a loopback port with a client for
// one protocol that trusts its certificate.
type harness struct {
	t      *testing.T
	l      *Listener
	drains *Drains
	base   string
	client *http.Client
	done   bool // stopped by the test
}

// stop shuts the listener down (the cleanup then does nothing more).
func (h *harness) stop(ctx context.Context) error {
	h.done = true
	return h.l.Shutdown(ctx)
}

// startListener starts a listener of cfg (Name, Address and TLS filled in
// when empty) whose requests h answers, with a client for proto.
func startListener(t *testing.T, cfg Config, proto string, h http.Handler) *harness {
	t.Helper()
	cert, err := selfsigned.New("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name == "" {
		cfg.Name = "test"
	}
	if cfg.Address == "" {
		cfg.Address = "127.0.0.1:0"
	}
	if cfg.TLS == nil {
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
	}
	hs := &harness{t: t, drains: new(Drains)}
	hs.l, err = Start(cfg, Deps{Pipeline: handlerPipeline{h}, Log: hclog.NewNullLogger(), Metrics: observe.NewMetrics(nil), Drains: hs.drains})
	if err != nil {
		t.Fatal(err)
	}
	hs.base = "https://" + hs.l.Addr().String()
	tc := &tls.Config{RootCAs: cert.Pool, ServerName: "localhost"}
	switch proto {
	case ProtocolH3:
		hs.client = &http.Client{Transport: &http3.Transport{TLSClientConfig: tc}}
	default:
		tr := &http.Transport{TLSClientConfig: tc, Protocols: new(http.Protocols)}
		tr.Protocols.SetHTTP1(proto == ProtocolH1)
		tr.Protocols.SetHTTP2(proto == ProtocolH2)
		hs.client = &http.Client{Transport: tr}
	}
	t.Cleanup(func() {
		hs.client.CloseIdleConnections()
		if c, ok := hs.client.Transport.(io.Closer); ok {
			_ = c.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if !hs.done {
			_ = hs.l.Shutdown(ctx)
		}
		hs.drains.Wait(ctx)
	})
	return hs
}

// ok answers 200 "ok".
var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

func (h *harness) get(path string) *http.Response {
	h.t.Helper()
	resp, err := h.client.Get(h.base + path)
	if err != nil {
		h.t.Fatalf("GET %s: %v", path, err)
	}
	return resp
}

// dialRaw is a bare QUIC connection to the listener, ALPN h3.
func dialRaw(t *testing.T, h *harness) *quic.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, h.l.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	return conn
}

// eventually polls cond until it holds or d passed.
func eventually(t *testing.T, d time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
