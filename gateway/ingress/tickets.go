package ingress

import (
	"bytes"
	"crypto/tls"
	"strconv"
	"sync"
)

// h3Tickets puts the HTTP/3 settings a client may rely on in 0-RTT into
// the session tickets a QUIC listener issues, and refuses early data on a
// resumption whose ticket promised more than the listener now allows
// (RFC 9114 §7.2.4.2: a server accepting 0-RTT must not reduce its
// settings). http3.Server.Serve does this itself; a listener served with
// ServeListener (on the gateway's own quic.Transport, addrvalidation.go) must.
// The one setting the gateway varies is SETTINGS_MAX_FIELD_SECTION_SIZE
// (max_header_bytes); datagrams are always off, extended CONNECT on.
type h3Tickets struct {
	mu       sync.Mutex
	src, out *tls.Config // the last configuration wrapped, and its wrapping
}

// h3TicketPrefix marks the gateway's entry in tls.SessionState.Extra.
const h3TicketPrefix = "impulse-h3-max-field-section="

// config returns src with WrapSession and UnwrapSession that carry
// maxField, built once per src (a reload brings a new one).
func (t *h3Tickets) config(src *tls.Config, maxField int) *tls.Config {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.src == src {
		return t.out
	}
	out := src.Clone()
	wrap, unwrap := src.WrapSession, src.UnwrapSession
	if wrap == nil {
		wrap = src.EncryptTicket
	}
	if unwrap == nil {
		unwrap = src.DecryptTicket
	}
	entry := []byte(h3TicketPrefix + strconv.Itoa(maxField))
	out.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		ss.Extra = append(ss.Extra, bytes.Clone(entry))
		return wrap(cs, ss)
	}
	out.UnwrapSession = func(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
		ss, err := unwrap(identity, cs)
		if err != nil || ss == nil || !ss.EarlyData {
			return ss, err
		}
		if promised, ok := ticketMaxField(ss.Extra); !ok || promised > maxField {
			ss.EarlyData = false // resumption still works, without 0-RTT
		}
		return ss, nil
	}
	t.src, t.out = src, out
	return out
}

// ticketMaxField finds the gateway's entry in a ticket's extras.
func ticketMaxField(extras [][]byte) (int, bool) {
	for _, e := range extras {
		if v, ok := bytes.CutPrefix(e, []byte(h3TicketPrefix)); ok {
			n, err := strconv.Atoi(string(v))
			return n, err == nil
		}
	}
	return 0, false
}
