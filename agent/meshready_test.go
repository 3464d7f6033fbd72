package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/discovery"
)

func TestMeshReadiness(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	denied := discovery.WatchStatus{LastError: "discovery: GET /v1/agent/connect/ca/leaf/web: status 403: Permission denied", LastErrorReason: "http_403"}
	leaf := &discovery.LeafCert{Service: "web", ValidBefore: now.Add(48 * time.Hour)}
	roots, ixns := &discovery.CARoots{}, &discovery.Intentions{}
	cases := []struct {
		name               string
		s                  meshState
		notReady, degraded []string // substrings, in order
	}{
		{"all there", meshState{leaf: leaf, roots: roots, intentions: ixns}, nil, nil},
		{"ACL denied at start", meshState{leafStatus: denied, roots: roots, intentions: ixns},
			[]string{"no leaf certificate yet (last error: discovery: GET /v1/agent/connect/ca/leaf/web: status 403"}, nil},
		{"Consul down at start", meshState{}, []string{"no leaf certificate yet", "no CA roots yet", "no intentions yet"}, nil},
		{"a leaf, Consul gone since", meshState{leaf: leaf, roots: roots, intentions: ixns, leafStatus: denied,
			rootsStatus: discovery.WatchStatus{LastError: "x"}, ixnStatus: discovery.WatchStatus{LastError: "y"}},
			nil, []string{"serving the last leaf certificate", "serving the last CA roots", "enforcing the last intentions"}},
		{"close to expiry, renewals failing", meshState{leaf: &discovery.LeafCert{ValidBefore: now.Add(time.Minute)}, roots: roots, intentions: ixns, leafStatus: denied},
			nil, []string{"expires at 2026-01-01T12:01:00Z and cannot be renewed"}},
		{"expired", meshState{leaf: &discovery.LeafCert{ValidBefore: now}, roots: roots, intentions: ixns, leafStatus: denied},
			[]string{"the leaf certificate expired at 2026-01-01T12:00:00Z"}, nil},
	}
	match := func(got, want []string) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if !strings.Contains(got[i], want[i]) || !strings.HasPrefix(got[i], "connect web: ") {
				return false
			}
		}
		return true
	}
	for _, c := range cases {
		c.s.service = "web"
		nr, dg := meshReadiness(c.s, now)
		if !match(nr, c.notReady) || !match(dg, c.degraded) {
			t.Errorf("%s: not ready %q, degraded %q; want %q and %q", c.name, nr, dg, c.notReady, c.degraded)
		}
	}
}
