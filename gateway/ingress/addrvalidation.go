package ingress

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"
)

// QUIC address validation (RFC 9000 §8.1.2): Retry packets under a
// handshake flood.

// retryAboveHandshakes is how many QUIC handshakes may be in progress on a
// listener before new connection attempts must prove their source address
// with a Retry round trip (RFC 9000 §8.1.2). A flood of Initials from
// spoofed addresses then costs the gateway one stateless Retry packet
// each, no larger than the Initial (no amplification), instead of a
// connection, a TLS handshake and an idle timer; a real client answers the
// Retry and pays one round trip more, only while the flood lasts.
// Handshakes normally take one round trip, so below this bound Retry is
// never used. A variable for tests.
var retryAboveHandshakes int64 = 128

// transport is the quic.Transport on conn: it asks for address validation
// under a handshake flood (retryAboveHandshakes) and holds each connection
// attempt to the listener's max_connections (lim). On a proxied socket its
// connection IDs never open like an SPP header (sppConnIDs).
func (q *quicIngress) transport(conn net.PacketConn, lim *connLimiter) *quic.Transport {
	threshold := retryAboveHandshakes
	var ids quic.ConnectionIDGenerator
	if _, ok := conn.(*proxyPacketConn); ok {
		ids = sppConnIDs{} // no short-header packet opens like an SPP header (udpheader.go)
	}
	return &quic.Transport{
		Conn:                  conn,
		ConnectionIDGenerator: ids,
		// Called for an Initial without a valid token only, before any
		// state is created for it.
		VerifySourceAddress: func(net.Addr) bool {
			if q.handshaking.Load() < threshold {
				return false
			}
			q.retried.Add(1)
			return true
		},
		// Called for every attempt that passed validation (or needed
		// none); ctx ends when the connection closes or its handshake
		// fails.
		ConnContext: func(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
			if !lim.tryAcquire() {
				return ctx, errTooManyConnections
			}
			hs := &pendingHandshake{n: &q.handshaking}
			q.handshaking.Add(1)
			context.AfterFunc(ctx, func() {
				hs.end()
				lim.release()
			})
			return context.WithValue(ctx, pendingHandshakeKey{}, hs), nil
		},
	}
}

// pendingHandshake is one connection attempt counted in handshaking until
// its handshake completes or fails.
type pendingHandshake struct {
	n    *atomic.Int64
	once sync.Once
}

func (h *pendingHandshake) end() { h.once.Do(func() { h.n.Add(-1) }) }

type pendingHandshakeKey struct{}

// handshakeAccepted is called when the HTTP/3 server takes connection c
// (ctx derives from the transport's ConnContext). An early listener hands
// connections over once the client's first flight is processed, before
// the handshake completes: the attempt stays counted until it does.
func (q *quicIngress) handshakeAccepted(ctx context.Context, c *quic.Conn) {
	hs, _ := ctx.Value(pendingHandshakeKey{}).(*pendingHandshake)
	if hs == nil {
		return
	}
	select {
	case <-c.HandshakeComplete():
		hs.end()
	default:
		go func() {
			select {
			case <-c.HandshakeComplete():
			case <-c.Context().Done():
			}
			hs.end()
		}()
	}
}
