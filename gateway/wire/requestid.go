package wire

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"unsafe"
)

// Request IDs: every request carries one x-request-id, kept from the
// client when sane, made up by the gateway otherwise. It goes to the
// backend on every try (retries and hedges send the same one), back to the
// client on every answer (the backend's, whose own x-request-id it
// replaces, and the gateway's own), and into the request's log record.

// RequestIDField is the canonical key of the x-request-id field.
const RequestIDField = "X-Request-Id"

// MaxRequestIDBytes is the longest client x-request-id the gateway keeps,
// in bytes; a longer one is replaced.
const MaxRequestIDBytes = 128

// saneRequestID reports whether the client's x-request-id field values
// (vals, as received: one entry per field line) can be kept: exactly one
// field, 1..MaxRequestIDBytes bytes of visible ASCII (0x21–0x7e), and no
// comma, which would read as a list of two IDs to a downstream parser
// (RFC 9110 §5.3). Anything else (none, empty, too long, a space or a
// control character, two fields) is replaced.
func saneRequestID(vals []string) bool {
	if len(vals) != 1 {
		return false
	}
	v := vals[0]
	if len(v) == 0 || len(v) > MaxRequestIDBytes {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x21 || c > 0x7e || c == ',' {
			return false
		}
	}
	return true
}

// generatedRequestID holds a made-up ID and the one-value field slice that
// carries it, in one allocation.
type generatedRequestID struct {
	field [1]string
	text  [32]byte
	raw   [16]byte
}

// newRequestID makes up an ID: 16 bytes from crypto/rand as 32 lowercase
// hex digits (the shape of nginx's $request_id), returned as a field value
// slice of one entry. One allocation; the string shares the struct's
// bytes, which are never written again.
func newRequestID() []string {
	g := new(generatedRequestID)
	_, _ = rand.Read(g.raw[:]) // never fails (crypto/rand, Go 1.24+)
	hex.Encode(g.text[:], g.raw[:])
	g.field[0] = unsafe.String(&g.text[0], len(g.text))
	return g.field[:]
}

// RequestID is the request ID of r as a one-value field slice: the
// client's own when saneRequestID, else a new one. It is set on r's header
// (outgoing copies it to every try's request), replacing what the client
// sent. Free when the client's is kept: the slice is r's.
func RequestID(r *http.Request) []string {
	if vals := r.Header[RequestIDField]; saneRequestID(vals) {
		return vals
	}
	id := newRequestID()
	if r.Header == nil {
		r.Header = make(http.Header, 1)
	}
	r.Header[RequestIDField] = id
	return id
}
