package observe

import (
	"testing"
	"time"
)

// TestGaugeSamplesDue: a sampled gauge is set when new, when its value
// changed and every touchEvery otherwise; a round that did not sample a
// series forgets it, so it is set again when it comes back.
func TestGaugeSamplesDue(t *testing.T) {
	var g gaugeSamples
	t0 := time.Unix(1e9, 0)
	k := sampleKey{"upstream", "web", ""}
	steps := []struct {
		at   time.Duration
		x, y int64
		want bool
	}{
		{0, 1, 2, true},                          // new
		{time.Second, 1, 2, false},               // unchanged
		{2 * time.Second, 3, 2, true},            // changed
		{3 * time.Second, 3, 2, false},           // unchanged
		{2*time.Second + touchEvery, 3, 2, true}, // touched again
	}
	for i, s := range steps {
		if got := g.due(k, t0.Add(s.at), s.x, s.y); got != s.want {
			t.Errorf("step %d: due %v, want %v", i, got, s.want)
		}
		g.endRound()
	}
	g.endRound() // a round without web: forgotten
	if len(g.last) != 0 {
		t.Fatalf("%d series kept after a round that did not sample them", len(g.last))
	}
	if !g.due(k, t0.Add(touchEvery+3*time.Second), 3, 2) {
		t.Error("a series back after it was forgotten is not set")
	}
}
