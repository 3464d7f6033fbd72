package agent

import (
	"fmt"
	"time"

	"github.com/impulse-agent/impulse-agent/discovery"
)

// meshState is what the agent knows of its Connect identity, for
// readiness: the last leaf and roots the watches delivered (zero before)
// and those watches' statuses.
type meshState struct {
	service     string
	leaf        *discovery.LeafCert
	roots       *discovery.CARoots
	intentions  *discovery.Intentions
	leafStatus  discovery.WatchStatus
	rootsStatus discovery.WatchStatus
	ixnStatus   discovery.WatchStatus
}

// meshRenewWarning is how long before the leaf expires a failing leaf
// watch makes the gateway degraded (Consul renews leaves at about half
// their lifetime, 72 h by default, so a leaf this close to its end means
// renewals have been failing).
const meshRenewWarning = time.Hour

// meshReadiness returns why mesh listeners cannot serve (notReady: the
// handshakes are refused) and what is degraded, issue 23: without a leaf
// (ACL denied, Consul down at start) or CA roots or intentions, or once
// the leaf has expired, the mesh is not ready; a gateway that had a leaf
// serves until that leaf expires, degraded while the watch fails.
func meshReadiness(s meshState, now time.Time) (notReady, degraded []string) {
	why := func(st discovery.WatchStatus) string {
		if st.LastError == "" {
			return ""
		}
		return " (last error: " + st.LastError + ")"
	}
	switch {
	case s.leaf == nil:
		notReady = append(notReady, fmt.Sprintf("connect %s: no leaf certificate yet%s", s.service, why(s.leafStatus)))
	case !now.Before(s.leaf.ValidBefore):
		notReady = append(notReady, fmt.Sprintf("connect %s: the leaf certificate expired at %s%s",
			s.service, s.leaf.ValidBefore.UTC().Format(time.RFC3339), why(s.leafStatus)))
	case s.leafStatus.LastError != "" && s.leaf.ValidBefore.Sub(now) < meshRenewWarning:
		degraded = append(degraded, fmt.Sprintf("connect %s: the leaf certificate expires at %s and cannot be renewed%s",
			s.service, s.leaf.ValidBefore.UTC().Format(time.RFC3339), why(s.leafStatus)))
	case s.leafStatus.LastError != "":
		degraded = append(degraded, fmt.Sprintf("connect %s: serving the last leaf certificate%s", s.service, why(s.leafStatus)))
	}
	switch {
	case s.roots == nil:
		notReady = append(notReady, fmt.Sprintf("connect %s: no CA roots yet%s", s.service, why(s.rootsStatus)))
	case s.rootsStatus.LastError != "":
		degraded = append(degraded, fmt.Sprintf("connect %s: serving the last CA roots%s", s.service, why(s.rootsStatus)))
	}
	switch {
	case s.intentions == nil:
		notReady = append(notReady, fmt.Sprintf("connect %s: no intentions yet%s", s.service, why(s.ixnStatus)))
	case s.ixnStatus.LastError != "":
		degraded = append(degraded, fmt.Sprintf("connect %s: enforcing the last intentions%s", s.service, why(s.ixnStatus)))
	}
	return notReady, degraded
}
