package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/auth"
)

// TestKeySetReadiness: /v1/ready's degraded lines for jwt key sets say
// truthfully what verifies: no set yet after a failed fetch, a stale set,
// the previous source's set carried over a reload, the last good set
// through failures; a healthy set, one being fetched for the first time
// and one idle past its refresh are not degraded.
func TestKeySetReadiness(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	fail := errors.New("x509: certificate signed by unknown authority")
	const u = "https://id.example/jwks.json"
	for _, tc := range []struct {
		name string
		s    auth.KeysState
		want string // "" for not degraded
	}{
		{"healthy", auth.KeysState{URL: u, Usable: true, FetchedAt: at, StaleAt: at.Add(auth.JWKSStaleAfter)}, ""},
		{"first fetch running", auth.KeysState{URL: u}, ""},
		{"idle past 24 h", auth.KeysState{URL: u, FetchedAt: at, StaleAt: at.Add(auth.JWKSStaleAfter)}, ""},
		{"no set yet", auth.KeysState{URL: u, LastErr: fail},
			"jwt key set " + u + ": no key set yet, tokens are refused with 503 auth_unavailable (last error: x509: certificate signed by unknown authority)"},
		{"stale", auth.KeysState{URL: u, FetchedAt: at, StaleAt: at.Add(auth.JWKSStaleAfter), LastErr: fail},
			"jwt key set " + u + ": stale since 2026-01-02T12:00:00Z, tokens are refused with 503 auth_unavailable (last error: "},
		{"carried", auth.KeysState{URL: u, Usable: true, Carried: true, FetchedAt: at, StaleAt: at.Add(auth.JWKSStaleAfter), LastErr: fail},
			"jwt key set " + u + ": verifying with the previous source's set until a fetch succeeds, stale at 2026-01-02T12:00:00Z (last error: "},
		{"outage", auth.KeysState{URL: u, Usable: true, FetchedAt: at, StaleAt: at.Add(auth.JWKSStaleAfter), LastErr: fail},
			"jwt key set " + u + ": verifying with the last good set, stale at 2026-01-02T12:00:00Z (last error: "},
	} {
		got := keySetReadiness([]auth.KeysState{tc.s})
		switch {
		case tc.want == "" && len(got) != 0:
			t.Errorf("%s: degraded %q", tc.name, got)
		case tc.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], tc.want)):
			t.Errorf("%s: %q, want %q...", tc.name, got, tc.want)
		}
	}
}
