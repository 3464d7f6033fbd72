package ingress

import (
	"crypto/tls"
	"testing"
)

// TestH3TicketsKeepSettingsFor0RTT: a ticket records max_header_bytes;
// resuming it with early data works while the listener allows at least as
// much, and falls back to a resumption without 0-RTT when it allows less
// or the ticket has no record (RFC 9114 §7.2.4.2).
func TestH3TicketsKeepSettingsFor0RTT(t *testing.T) {
	var saved *tls.SessionState
	src := &tls.Config{
		WrapSession: func(_ tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
			saved = ss
			return []byte("ticket"), nil
		},
		UnwrapSession: func([]byte, tls.ConnectionState) (*tls.SessionState, error) { return saved, nil },
	}
	issue := func(maxField int) {
		var tk h3Tickets
		if _, err := tk.config(src, maxField).WrapSession(tls.ConnectionState{}, &tls.SessionState{EarlyData: true}); err != nil {
			t.Fatal(err)
		}
	}
	resume := func(maxField int) bool {
		var tk h3Tickets
		ss, err := tk.config(src, maxField).UnwrapSession([]byte("ticket"), tls.ConnectionState{})
		if err != nil {
			t.Fatal(err)
		}
		early := ss.EarlyData
		ss.EarlyData = true
		return early
	}
	issue(4096)
	if !resume(4096) || !resume(65536) {
		t.Error("0-RTT refused with the same or a larger max_header_bytes")
	}
	if resume(1024) {
		t.Error("0-RTT accepted although max_header_bytes shrank below what the ticket promised")
	}
	saved = &tls.SessionState{EarlyData: true} // a ticket issued without the record
	if resume(65536) {
		t.Error("0-RTT accepted for a ticket without the settings record")
	}
	var tk h3Tickets
	if tk.config(src, 1) != tk.config(src, 1) {
		t.Error("the wrapped configuration is rebuilt for every handshake")
	}
}
