package gateway

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves goroutines behind: every
// listener, checker, sampler and backend connection must stop with its
// owner.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
