// Package tunnel relays the tunnels the gateway opens for upgrades: an
// HTTP/1.1 Upgrade, or an extended CONNECT over HTTP/2 (RFC 8441) and
// HTTP/3 (RFC 9220), each turned into an HTTP/1.1 upgrade to the backend.
// It parses what a request asks for (Of), builds the backend's handshake
// (Outgoing), answers the client (Tunnel.Answer), relays bytes both ways
// with WebSocket close frames at frame boundaries (Tunnel.Run), and keeps
// a listener's open tunnels for its drain (Set). Admission, the choice of
// a backend and the retries are the pipeline's.
package tunnel

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/gateway/wire"
)

// linger bounds how long a tunnel stays open after one side ended its
// half (a client's end of stream, a backend's close) for the other to
// end its own.
const linger = 10 * time.Second

// Outgoing builds the backend's handshake request for r: a GET with
// r's end-to-end fields (Sec-WebSocket-* among them) and
// "Connection: Upgrade" with the protocol asked for. key is the
// Sec-WebSocket-Key the gateway made up for an extended CONNECT's
// WebSocket, "" otherwise. tt is the handshake's trace (nil: none).
func Outgoing(ctx context.Context, r *http.Request, b *upstream.Backend, tr Request, tt *observe.TryTrace) (*http.Request, string) {
	delete(r.Header, ":protocol")
	out, _ := wire.Outgoing(ctx, r, b, wire.Body{}, false, tt)
	out.Method = http.MethodGet
	out.Body, out.GetBody, out.ContentLength, out.TransferEncoding, out.Trailer = nil, nil, 0, nil, nil
	upgrade := tr.Upgrade
	if upgrade == "" {
		upgrade = tr.Token
	}
	out.Header["Connection"] = []string{"Upgrade"}
	out.Header["Upgrade"] = []string{upgrade}
	key := ""
	if tr.Extended && tr.Token == WebSocket {
		key = newWebSocketKey()
		out.Header["Sec-Websocket-Key"] = []string{key}
	}
	return out, key
}

// Tunnel is one open tunnel: the client's side (a hijacked HTTP/1.1
// connection, or an HTTP/2 or HTTP/3 stream's body and response writer)
// and the backend's upgraded connection.
type Tunnel struct {
	metrics *observe.Metrics
	ws      bool
	key     observe.TunnelKey
	proto   string // the client's protocol: h1, h2 or h3
	backend io.ReadWriteCloser
	body    io.ReadCloser // the request body: the client's bytes over HTTP/2 and HTTP/3
	conn    net.Conn      // the hijacked client connection (HTTP/1.1); nil otherwise
	rc      *http.ResponseController
	fromCl  io.Reader // the client's bytes

	toClient, toBackend tunnelWriter
	drained             atomic.Bool // a drain closed it (Set.CloseAll)
	clientBroke         atomic.Bool // reading the client's side failed first
	// clientEnded: the client ended its half first (FIN, END_STREAM),
	// perhaps without a close frame: how the backend ends after that is an
	// answer to the client's leaving, never the backend's failure.
	clientEnded  atomic.Bool
	backendBroke bool          // the backend's side broke (Run's result)
	hard         chan struct{} // closed when a drain's grace is over

	mu     sync.Mutex // guards what follows: the drain's and linger's timers against the end
	ended  bool
	timers []*time.Timer
}

// New is the tunnel of a request over the client protocol proto (h1, h2
// or h3) with body, its request body, to the backend's upgraded
// connection backend, for tr. Its gauge and byte counters are m's, under
// key.
func New(m *observe.Metrics, key observe.TunnelKey, tr Request, proto string, body io.ReadCloser, backend io.ReadWriteCloser) *Tunnel {
	t := &Tunnel{metrics: m, key: key, ws: tr.Token == WebSocket, proto: proto, body: body, backend: backend}
	t.toBackend.bytes = m.TunnelByteCounter(key.Listener, key.Upstream, true)
	t.toClient.bytes = m.TunnelByteCounter(key.Listener, key.Upstream, false)
	return t
}

// BackendBroke reports, once Run returned, whether the tunnel ended
// because the backend's side broke (its connection failed, or a WebSocket
// ended without a close frame at a frame boundary), not the client's or a
// drain.
func (t *Tunnel) BackendBroke() bool { return t.backendBroke }

// Protocol is the client's protocol: h1, h2 or h3.
func (t *Tunnel) Protocol() string { return t.proto }

// Bytes is the bytes relayed so far each way: to the backend (the
// client's) and to the client.
func (t *Tunnel) Bytes() (toBackend, toClient int64) {
	return t.toBackend.sent.Load(), t.toClient.sent.Load()
}

// Answer tells the client the tunnel is open: the backend's 101 over
// HTTP/1.1 (on the hijacked connection), a 200 over HTTP/2 and HTTP/3
// (RFC 8441 §5, RFC 9220 §3) without the fields only the HTTP/1.1
// handshake has. It returns the status sent.
func (t *Tunnel) Answer(w http.ResponseWriter, r *http.Request, resp *http.Response) (int, error) {
	h := resp.Header.Clone()
	upgrade := h["Upgrade"]
	wire.RemoveHopHeaders(h)
	delete(h, "Alt-Svc")
	t.rc = http.NewResponseController(w)
	if r.ProtoMajor == 1 {
		conn, brw, err := t.rc.Hijack()
		if err != nil {
			return 0, err
		}
		_ = conn.SetDeadline(time.Time{}) // net/http's header and idle deadlines are over
		t.conn = conn
		h["Connection"] = []string{"Upgrade"}
		h["Upgrade"] = upgrade
		if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n"); err != nil {
			conn.Close()
			return 0, err
		}
		if err := h.Write(brw); err != nil {
			conn.Close()
			return 0, err
		}
		if _, err := brw.WriteString("\r\n"); err != nil {
			conn.Close()
			return 0, err
		}
		if err := brw.Flush(); err != nil {
			conn.Close()
			return 0, err
		}
		t.fromCl = conn
		if brw.Reader.Buffered() > 0 {
			t.fromCl = brw.Reader // bytes the client sent right after its request
		}
		t.toClient.w = conn
		t.setup()
		return http.StatusSwitchingProtocols, nil
	}
	if t.ws {
		delete(h, "Sec-Websocket-Accept")
	}
	dst := w.Header()
	for k, v := range h {
		dst[k] = v
	}
	w.WriteHeader(http.StatusOK)
	if err := t.rc.Flush(); err != nil {
		return 0, err
	}
	t.fromCl = r.Body
	t.toClient.w = w
	t.toClient.flush = t.rc.Flush
	t.setup()
	return http.StatusOK, nil
}

func (t *Tunnel) setup() {
	t.toBackend.w = t.backend
	if t.ws {
		t.toClient.frames, t.toBackend.frames = &wsFrames{}, &wsFrames{}
	}
	t.hard = make(chan struct{})
}

// Run relays both ways until the tunnel ends, and reports whether it
// ended cleanly: both sides done (for WebSocket, after a close frame at a
// frame boundary) or closed by a drain (for WebSocket, one that sent the
// client a close frame). On a broken end over HTTP/1.1 the client's
// connection is reset here; over HTTP/2 and HTTP/3 the caller resets the
// stream.
func (t *Tunnel) Run(set *Set) bool {
	t.metrics.TunnelDelta(t.key, 1)
	defer t.metrics.TunnelDelta(t.key, -1)
	if set != nil {
		set.add(t)
		defer set.remove(t)
	}
	defer t.end()
	fromClient := make(chan error, 1)
	go func() {
		err := t.toBackend.copyFrom(t.fromCl)
		if err == nil {
			// The client ended its half: so does the gateway toward the
			// backend, which gets linger to end its own.
			t.clientEnded.Store(true)
			if cw, ok := t.backend.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			t.after(linger, func() { t.backend.Close() })
		} else {
			t.clientBroke.Store(true)
			t.backend.Close() // unblocks the other direction
		}
		fromClient <- err
	}()
	berr := t.toClient.copyFrom(t.backend)
	clean := berr == nil && (!t.ws || t.toClient.frames.closed && t.toClient.frames.atBoundary())
	if t.drained.Load() {
		clean = !t.ws || t.toClient.sentClose()
	}
	t.backendBroke = !clean && !t.drained.Load() && !t.clientBroke.Load() && !t.clientEnded.Load() && !t.toClient.writeFailed
	t.backend.Close()
	if t.conn == nil {
		if !clean {
			_ = t.body.Close() // ends the client-to-backend copy
			<-fromClient
		}
		// A clean end leaves the request body to the server, which stops
		// it with H3_NO_ERROR / RST_STREAM(NO_ERROR) once this handler
		// returns (RFC 9114 §4.1, RFC 9113 §8.1): Close would say
		// H3_REQUEST_CANCELLED. That ends the client-to-backend copy.
		return clean
	}
	if !clean {
		resetConn(t.conn)
		<-fromClient
		return true // the connection was the tunnel's: nothing left to reset
	}
	if t.ws {
		// The close handshake is over and the backend closed, as a
		// WebSocket server closes first (RFC 6455 §7.1.1): so does the
		// gateway.
		t.conn.Close()
		<-fromClient
		return true
	}
	// The backend closed its side: so does the gateway toward the client,
	// which gets linger (a drain: its grace) to close its own.
	if cw, ok := t.conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	t.after(linger, func() { t.conn.Close() })
	select {
	case <-fromClient:
	case <-t.hard:
		t.conn.Close()
		<-fromClient
	}
	t.conn.Close()
	return true
}

// after runs f after d unless the tunnel has ended by then.
func (t *Tunnel) after(d time.Duration, f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return
	}
	t.timers = append(t.timers, time.AfterFunc(d, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !t.ended {
			f()
		}
	}))
}

// end stops the timers: nothing touches the tunnel's connections, or the
// response writer, once run returns.
func (t *Tunnel) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended = true
	for _, tm := range t.timers {
		tm.Stop()
	}
}

// drain closes the tunnel for a drain: a close frame (1001) to both sides
// where each is at a frame boundary, then, after grace (0: at once), the
// connections under it. Other protocols' tunnels close at once.
func (t *Tunnel) drain(grace time.Duration) {
	t.mu.Lock()
	if t.ended || t.drained.Swap(true) {
		t.mu.Unlock()
		return
	}
	if t.ws {
		deadline := time.Now().Add(max(grace, 100*time.Millisecond))
		if t.conn != nil {
			_ = t.conn.SetWriteDeadline(deadline)
		} else {
			_ = t.rc.SetWriteDeadline(deadline)
		}
		t.toClient.sendClose(wsCloseFrame(wsCloseGoingAway, "gateway draining", false))
		t.toBackend.sendClose(wsCloseFrame(wsCloseGoingAway, "gateway draining", true))
	} else {
		t.backend.Close()
	}
	if grace <= 0 {
		t.cut()
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	t.after(grace, t.cut)
}

// cut closes the connections under the tunnel; t.mu is held.
func (t *Tunnel) cut() {
	close(t.hard)
	t.backend.Close()
	if t.conn != nil {
		t.conn.Close()
		return
	}
	_ = t.rc.SetWriteDeadline(time.Now())
	_ = t.body.Close()
}

// resetConn closes c with a TCP reset where it can, so the client sees an
// error rather than what could pass for a clean end.
func resetConn(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn() // tls.Conn's Close sends close_notify: a clean end
	}
	for inner := c; inner != nil; {
		if tcp, ok := inner.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0)
			break
		}
		w, ok := inner.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		inner = w.NetConn()
	}
	_ = c.Close() // the max_connections wrapper's Close gives the slot back
}

// tunnelWriter is one direction of a tunnel: writes are serialised with
// the gateway's own close frame, and (for WebSocket) follow the frame
// boundaries so that frame goes between two others.
type tunnelWriter struct {
	mu          sync.Mutex
	w           io.Writer
	flush       func() error // HTTP/2, HTTP/3: each write goes out at once
	frames      *wsFrames    // nil: not WebSocket
	closed      bool         // the gateway's close frame went out
	bytes       *observe.TunnelBytes
	sent        atomic.Int64 // bytes written this way, for the access log
	writeFailed bool         // a write failed (under mu): the other side broke
}

// copyFrom relays src until it ends; nil at src's clean end (EOF).
func (tw *tunnelWriter) copyFrom(src io.Reader) error {
	bufp := wire.Buffer()
	defer wire.PutBuffer(bufp)
	buf := *bufp
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if err := tw.write(buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

func (tw *tunnelWriter) write(p []byte) error {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if tw.closed {
		// After the gateway's close frame nothing more goes this way
		// (RFC 6455 §5.5.1), but the close handshake goes on: dropped.
		return nil
	}
	n, err := tw.w.Write(p)
	if err != nil {
		tw.writeFailed = true
	}
	if tw.frames != nil {
		tw.frames.feed(p[:n])
	}
	tw.bytes.Add(n)
	tw.sent.Add(int64(n))
	if err == nil && tw.flush != nil {
		err = tw.flush()
	}
	return err
}

// sendClose writes frame (a close) if no write is under way and the
// stream is between frames, and ends the direction.
func (tw *tunnelWriter) sendClose(frame []byte) {
	if !tw.mu.TryLock() {
		return // mid-write: no boundary to put it at
	}
	defer tw.mu.Unlock()
	if tw.closed || tw.frames == nil || !tw.frames.atBoundary() || tw.frames.closed {
		return
	}
	if _, err := tw.w.Write(frame); err != nil {
		return
	}
	if tw.flush != nil && tw.flush() != nil {
		return
	}
	tw.closed = true
}

// sentClose reports whether the gateway's close frame went out.
func (tw *tunnelWriter) sentClose() bool {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return tw.closed
}
