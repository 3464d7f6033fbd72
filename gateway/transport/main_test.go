package transport

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: the
// direct HTTP/1.1 path owns its connections and their timers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
