package ingress

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// TestDrainClosesQuietConnections: a client that keeps its connection open
// after GOAWAY (or vanished without closing it) does not hold the drain until
// drain_timeout: once no request has been in flight for drainQuiet, the
// remaining connections are closed and Shutdown returns nil.
func TestDrainClosesQuietConnections(t *testing.T) {
	defer func(d time.Duration) { drainQuiet = d }(drainQuiet)
	drainQuiet = 200 * time.Millisecond
	h := startListener(t, Config{}, ProtocolH3, ok)
	resp := h.get("/")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// A client that ignores GOAWAY: a bare QUIC connection that never closes.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := h.l
	before := l.QUICConns()
	conn := dialRaw(t, h)
	// The client's handshake can complete before the server has taken the
	// connection: a drain started then would close it as quic-go's listener
	// goes, not as an idle HTTP/3 connection.
	for deadline := time.Now().Add(5 * time.Second); l.QUICConns() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the gateway never saw the connection")
		}
	}
	start := time.Now()
	if err := h.stop(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the drain took %s with nothing in flight", d)
	}
	select {
	case <-conn.Context().Done():
		var ae *quic.ApplicationError
		if err := context.Cause(conn.Context()); !errors.As(err, &ae) || ae.ErrorCode != quic.ApplicationErrorCode(http3.ErrCodeNoError) {
			t.Fatalf("the idle connection was closed with %v, want H3_NO_ERROR", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the idle connection is still open")
	}
}
