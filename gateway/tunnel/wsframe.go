package tunnel

import (
	"crypto/rand"
	"encoding/binary"
)

// wsFrames follows the frame boundaries of one direction of a WebSocket
// connection (RFC 6455 §5.2) without buffering it, so the gateway knows
// when it may put a frame of its own (a close at drain) between two frames,
// and whether a close frame went by. The zero value is at a boundary.
type wsFrames struct {
	hdr     [14]byte // the header being read, at most 14 bytes
	have    int      // bytes of hdr read so far
	payload uint64   // payload bytes left in the current frame
	closed  bool     // a close frame (opcode 0x8) has started
	lost    bool     // framing not understood: never inject
}

// feed advances over p.
func (f *wsFrames) feed(p []byte) {
	for len(p) > 0 && !f.lost {
		if f.payload > 0 {
			n := uint64(len(p))
			if n > f.payload {
				n = f.payload
			}
			f.payload -= n
			p = p[n:]
			continue
		}
		f.hdr[f.have] = p[0]
		f.have++
		p = p[1:]
		need, ok := wsHeaderLen(f.hdr[:f.have])
		if !ok {
			f.lost = true
			return
		}
		if f.have < need {
			continue
		}
		f.payload = wsPayloadLen(f.hdr[:need])
		if f.hdr[0]&0x0f == 0x8 {
			f.closed = true
		}
		f.have = 0
	}
}

// atBoundary reports whether the bytes fed so far end a frame.
func (f *wsFrames) atBoundary() bool { return !f.lost && f.have == 0 && f.payload == 0 }

// wsHeaderLen is the length of the frame header whose first bytes are h,
// once known (len(h) ≥ 2), else 2; false for a 64-bit length with its top
// bit set (RFC 6455 §5.2: "the most significant bit MUST be 0").
func wsHeaderLen(h []byte) (int, bool) {
	if len(h) < 2 {
		return 2, true
	}
	n := 2
	switch h[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
		if len(h) > 2 && h[2]&0x80 != 0 {
			return 0, false
		}
	}
	if h[1]&0x80 != 0 { // masked: a 4-byte key follows
		n += 4
	}
	return n, true
}

// wsPayloadLen is the payload length of the complete header h.
func wsPayloadLen(h []byte) uint64 {
	switch l := h[1] & 0x7f; l {
	case 126:
		return uint64(binary.BigEndian.Uint16(h[2:4]))
	case 127:
		return binary.BigEndian.Uint64(h[2:10])
	default:
		return uint64(l)
	}
}

// WebSocket close codes (RFC 6455 §7.4.1) the gateway sends.
const (
	wsCloseGoingAway = 1001 // the gateway drains
)

// wsCloseFrame is a close frame with code and reason (at most 123 bytes,
// RFC 6455 §5.5), masked with a random key when masked (frames a client
// sends, RFC 6455 §5.3: the gateway speaks as the client to the backend).
func wsCloseFrame(code uint16, reason string, masked bool) []byte {
	if len(reason) > 123 {
		reason = reason[:123]
	}
	payload := make([]byte, 2+len(reason))
	binary.BigEndian.PutUint16(payload, code)
	copy(payload[2:], reason)
	frame := []byte{0x88, byte(len(payload))} // FIN + close; lengths ≤ 125
	if !masked {
		return append(frame, payload...)
	}
	frame[1] |= 0x80
	var key [4]byte
	_, _ = rand.Read(key[:])
	frame = append(frame, key[:]...)
	for i, c := range payload {
		frame = append(frame, c^key[i%4])
	}
	return frame
}
