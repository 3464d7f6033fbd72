package agent

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// TestMeshIntentionProblemsLoggedOnce: an intention the gateway cannot
// enforce (a regex RE2 refuses) is logged when it first arrives, not again
// while the set of problems is unchanged, and again once it changes.
func TestMeshIntentionProblemsLoggedOnce(t *testing.T) {
	logs := &syncBuffer{}
	m := newMeshIdentity(&hcl.Connect{Service: "web"}, hclog.New(&hclog.LoggerOptions{Output: logs}))
	bad := func(re string) discovery.Intentions {
		return discovery.Intentions{Service: "web", DefaultPolicy: discovery.PolicyAllow, Intentions: []discovery.Intention{{
			SourceName: "client", DestinationName: "web", Precedence: 9,
			Permissions: []discovery.IntentionPermission{{Action: "allow", HTTP: &discovery.IntentionHTTP{PathRegex: re}}},
		}}}
	}
	count := func() int { return strings.Count(logs.String(), "intention denies: it cannot be enforced") }
	m.setIntentions(bad("(?<=x)"))
	m.setIntentions(bad("(?<=x)"))
	if n := count(); n != 1 {
		t.Fatalf("after the same problem twice: logged %d times, want 1\n%s", n, logs)
	}
	m.setIntentions(bad("(?!y)"))
	if n := count(); n != 2 {
		t.Fatalf("after a new problem: logged %d times, want 2\n%s", n, logs)
	}
	m.setIntentions(discovery.Intentions{Service: "web", DefaultPolicy: discovery.PolicyAllow})
	m.setIntentions(bad("(?!y)"))
	if n := count(); n != 3 {
		t.Fatalf("a problem back after a clean set: logged %d times, want 3\n%s", n, logs)
	}
}
