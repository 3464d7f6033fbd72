package testbackend

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// WSEcho is a WebSocket echo backend (coder/websocket over HTTP/1.1,
// subprotocol "chat"): the far end of every tunnel test. It keeps the
// handshake fields of the last connection (what the gateway forwarded)
// and sends on Closes the close status each connection ended with. Besides
// echoing, it understands two commands: "ping-me" (it pings the client,
// then answers "pong-ok") and "close:<code>" (it closes with 4002 for
// "close:4002", 4000 for any other).
type WSEcho struct {
	*httptest.Server
	Closes chan websocket.StatusCode // one per connection, when it ends (buffered: 16)

	mu      sync.Mutex
	headers http.Header
}

// NewWSEcho starts a WSEcho, closed at the test's end.
func NewWSEcho(t testing.TB) *WSEcho {
	e := &WSEcho{Closes: make(chan websocket.StatusCode, 16)}
	e.Server = NewH1(t, http.HandlerFunc(e.serve))
	return e
}

func (e *WSEcho) serve(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.headers = r.Header.Clone()
	e.mu.Unlock()
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"chat"}})
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(64 << 20)
	ctx := r.Context()
	for {
		typ, msg, err := c.Read(ctx)
		if err != nil {
			e.Closes <- websocket.CloseStatus(err)
			return
		}
		switch s := string(msg); {
		case s == "ping-me":
			// Ping waits for a pong that only a Read in progress takes in.
			go func() {
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				if c.Ping(pctx) == nil {
					_ = c.Write(ctx, websocket.MessageText, []byte("pong-ok"))
				}
			}()
		case strings.HasPrefix(s, "close:"):
			code := websocket.StatusCode(4000)
			if s == "close:4002" {
				code = 4002
			}
			err = c.Close(code, "asked to")
			e.Closes <- code
			return
		default:
			err = c.Write(ctx, typ, msg)
		}
		if err != nil {
			e.Closes <- websocket.CloseStatus(err)
			return
		}
	}
}

// Header is the named handshake field of the last connection.
func (e *WSEcho) Header(name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.headers.Get(name)
}
