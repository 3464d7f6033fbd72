package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
)

// wsClient is a client WebSocket through the gateway over one ingress
// protocol: gobwas/ws frames on an HTTP/1.1 upgrade (its own dialer), or on
// the stream of an extended CONNECT (RFC 8441 over net/http's HTTP/2
// client, RFC 9220 over quic-go's HTTP/3 client).
type wsClient struct {
	rw     io.ReadWriter
	resp   *http.Response // the handshake answer (HTTP/2, HTTP/3)
	status int
	close  func()   // abandons the transport
	end    func()   // ends the client's half (FIN / END_STREAM)
	conn   net.Conn // HTTP/1.1
}

// dialWS opens a WebSocket to path through h's gateway over h.proto, with
// extra handshake fields. A refused handshake returns the status in
// wsClient.status and a nil rw (HTTP/2, HTTP/3) or an error (HTTP/1.1, as
// ws.StatusError).
func dialWS(t *testing.T, h *harness, path string, extra http.Header) (*wsClient, error) {
	t.Helper()
	proto, addr := h.proto, strings.TrimPrefix(h.base, "https://")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tc := &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"}
	switch proto {
	case ProtocolH1:
		tc.NextProtos = []string{"http/1.1"}
		d := ws.Dialer{TLSConfig: tc, Protocols: []string{"chat"}, Header: ws.HandshakeHeaderHTTP(extra)}
		conn, br, _, err := d.Dial(ctx, "wss://"+addr+path)
		if err != nil {
			var se ws.StatusError
			if errors.As(err, &se) {
				return &wsClient{status: int(se)}, err
			}
			return nil, err
		}
		var r io.Reader = conn
		if br != nil {
			r = io.MultiReader(br, conn)
		}
		c := &wsClient{rw: struct {
			io.Reader
			io.Writer
		}{r, conn}, status: 101, conn: conn, close: func() { conn.Close() }}
		c.end = func() {
			if cw, ok := conn.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
		}
		return c, nil
	case ProtocolH2:
		// x/net's client: net/http's refuses the :protocol field name.
		tr := &http2.Transport{TLSClientConfig: tc}
		pr, pw := io.Pipe()
		req, _ := http.NewRequest(http.MethodConnect, "https://"+addr+path, pr)
		req.Header = http.Header{":protocol": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Protocol": {"chat"}}
		for k, v := range extra {
			req.Header[k] = v
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			tr.CloseIdleConnections()
			return nil, err
		}
		c := &wsClient{resp: resp, status: resp.StatusCode}
		c.close = func() { pw.CloseWithError(errors.New("abandoned")); resp.Body.Close(); tr.CloseIdleConnections() }
		if resp.StatusCode != http.StatusOK {
			c.close()
			return c, nil
		}
		c.rw = struct {
			io.Reader
			io.Writer
		}{resp.Body, pw}
		c.end = func() { pw.Close() }
		return c, nil
	default:
		tc.NextProtos = []string{http3.NextProtoH3}
		qc, err := quic.DialAddr(ctx, addr, tc, &quic.Config{})
		if err != nil {
			return nil, err
		}
		cc := (&http3.Transport{}).NewClientConn(qc)
		select {
		case <-cc.ReceivedSettings():
		case <-ctx.Done():
			qc.CloseWithError(0, "")
			return nil, ctx.Err()
		}
		if !cc.Settings().EnableExtendedConnect {
			qc.CloseWithError(0, "")
			return nil, errors.New("the gateway does not announce SETTINGS_ENABLE_CONNECT_PROTOCOL")
		}
		rs, err := cc.OpenRequestStream(context.Background())
		if err != nil {
			qc.CloseWithError(0, "")
			return nil, err
		}
		u, _ := url.Parse("https://" + addr + path)
		req := &http.Request{Method: http.MethodConnect, Proto: "websocket", URL: u, Host: u.Host,
			Header: http.Header{"Sec-Websocket-Version": {"13"}, "Sec-Websocket-Protocol": {"chat"}}}
		for k, v := range extra {
			req.Header[k] = v
		}
		if err := rs.SendRequestHeader(req); err != nil {
			qc.CloseWithError(0, "")
			return nil, err
		}
		resp, err := rs.ReadResponse()
		if err != nil {
			qc.CloseWithError(0, "")
			return nil, err
		}
		c := &wsClient{resp: resp, status: resp.StatusCode, close: func() { qc.CloseWithError(0, "") }}
		if resp.StatusCode != http.StatusOK {
			c.close()
			return c, nil
		}
		c.rw = rs
		c.end = func() { rs.Close() }
		return c, nil
	}
}

// send writes one client message.
func (c *wsClient) send(op ws.OpCode, p []byte) error { return wsutil.WriteClientMessage(c.rw, op, p) }

// recv reads the next data message; pings are answered and a close frame
// is answered and returned as wsutil.ClosedError.
func (c *wsClient) recv() ([]byte, ws.OpCode, error) { return wsutil.ReadServerData(c.rw) }

// readClose reads frames up to a close frame and returns its code. Not
// wsutil's reader: it would answer the close, and the gateway may have
// ended the stream by then (a write error would hide the close).
func (c *wsClient) readClose() (ws.StatusCode, error) {
	for {
		f, err := ws.ReadFrame(c.rw)
		if err != nil {
			return 0, err
		}
		if f.Header.OpCode != ws.OpClose {
			continue
		}
		if f.Header.Masked {
			ws.Cipher(f.Payload, f.Header.Mask, 0)
		}
		code, _ := ws.ParseCloseFrameData(f.Payload)
		return code, nil
	}
}
