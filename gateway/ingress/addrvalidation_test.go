package ingress

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// initialPacket is a QUIC version 1 Initial packet (RFC 9000 §17.2.2) from
// a client that does not exist: random connection IDs, no token, a
// payload of zeros that no key decrypts, padded to the 1200 bytes a
// server requires of a client's first datagram (RFC 9000 §14.1). It is
// what a spoofed flood costs its sender to make.
func initialPacket(dcid, scid []byte) []byte {
	p := []byte{0xc0, 0, 0, 0, 1} // long header, type Initial, 1-byte packet number; version 1
	p = append(p, byte(len(dcid)))
	p = append(p, dcid...)
	p = append(p, byte(len(scid)))
	p = append(p, scid...)
	p = append(p, 0)                                          // token length
	rest := 1200 - len(p) - 2                                 // packet number and payload, after the 2-byte length
	p = binary.BigEndian.AppendUint16(p, 0x4000|uint16(rest)) // varint length
	return append(p, make([]byte, rest)...)
}

// isRetryFor reports whether b is a version 1 Retry packet (RFC 9000
// §17.2.5) addressed to the connection ID scid.
func isRetryFor(b, scid []byte) bool {
	if len(b) < 7 || b[0]&0xf0 != 0xf0 || binary.BigEndian.Uint32(b[1:5]) != 1 {
		return false
	}
	n := int(b[5])
	return len(b) >= 6+n && string(b[6:6+n]) == string(scid)
}

// TestQUICAddressValidationUnderInitialFlood: once retryAboveHandshakes
// handshakes are in progress, Initials from unvalidated addresses get a
// stateless Retry (RFC 9000 §8.1.2) instead of a connection: a raw sender
// flooding the listener with Initials only ever holds that many
// handshakes, every further Initial it sends is answered with a Retry
// naming its connection ID (bursts within quic-go's Retry queue, so none
// is dropped), and a real client still connects, through a Retry.
func TestQUICAddressValidationUnderInitialFlood(t *testing.T) {
	old := retryAboveHandshakes
	retryAboveHandshakes = 4
	defer func() { retryAboveHandshakes = old }()
	h := startListener(t, Config{Protocols: []string{ProtocolH3}}, ProtocolH3, ok)
	q := h.l.quic

	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	to := h.l.Addr()
	newID := func() []byte { b := make([]byte, 8); rand.Read(b); return b }

	// The first Initials each start a handshake that never completes
	// (nothing decrypts); they stay counted until the handshake idle
	// timeout, longer than this test.
	for range retryAboveHandshakes {
		if _, err := udp.WriteTo(initialPacket(newID(), newID()), to); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, func() bool { return q.handshaking.Load() == retryAboveHandshakes }, "the first handshakes to start")

	const bursts, burst = 25, 4
	buf := make([]byte, 2048)
	retries := 0
	for range bursts {
		scids := map[string]bool{}
		for range burst {
			scid := newID()
			scids[string(scid)] = true
			if _, err := udp.WriteTo(initialPacket(newID(), scid), to); err != nil {
				t.Fatal(err)
			}
		}
		_ = udp.SetReadDeadline(time.Now().Add(5 * time.Second))
		for len(scids) > 0 {
			n, _, err := udp.ReadFrom(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("%d Initials of a burst got no Retry (after %d Retries)", len(scids), retries)
				}
				t.Fatal(err)
			}
			for scid := range scids {
				if isRetryFor(buf[:n], []byte(scid)) {
					delete(scids, scid)
					retries++
				}
			}
		}
		if n := q.handshaking.Load(); n > retryAboveHandshakes {
			t.Fatalf("%d handshakes in progress under the flood, want at most %d", n, retryAboveHandshakes)
		}
	}
	if retries != bursts*burst {
		t.Errorf("%d Retries for %d Initials", retries, bursts*burst)
	}

	before := q.retried.Load()
	resp := h.get("/")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("a real client during the flood: %d", resp.StatusCode)
	}
	if q.retried.Load() == before {
		t.Error("the real client's connection was not validated by a Retry")
	}
}
