package split

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/balance"
)

// within reports whether got of n is share (0..1) of n to ±tol (absolute,
// as a fraction of n).
func within(got, n int, share, tol float64) bool {
	return math.Abs(float64(got)/float64(n)-share) <= tol
}

// TestN04Distribution: 90/10 and a three-way split over 10,000 points of
// the Weyl sequence are exact to far better than ±2% (case N04).
func TestN04Distribution(t *testing.T) {
	for _, ws := range [][]int{{90, 10}, {1, 1}, {70, 20, 10}, {1, 0, 3}, {999, 1}} {
		c, err := New(ws)
		if err != nil {
			t.Fatal(err)
		}
		var total int
		for _, w := range ws {
			total += w
		}
		counts := make([]int, len(ws))
		const n = 10000
		for range n {
			counts[c.Choose(c.Next(), nil)]++
		}
		for i, w := range ws {
			share := float64(w) / float64(total)
			if !within(counts[i], n, share, 0.002) { // ±0.2%, ten times tighter than N04 asks
				t.Errorf("weights %v: split %d got %d of %d, want %.1f%%", ws, i, counts[i], n, share*100)
			}
		}
	}
}

// TestStickyKeys: the same key always gets the same split, and 10,000
// distinct keys spread by weight (±2%).
func TestStickyKeys(t *testing.T) {
	c, _ := New([]int{90, 10})
	k, err := balance.ParseHashKey("cookie:session")
	if err != nil {
		t.Fatal(err)
	}
	var v2 int
	const n = 10000
	r := &http.Request{Header: http.Header{}}
	for i := range n {
		r.Header.Set("Cookie", "session=s"+strconv.Itoa(i))
		h, ok := k.Hash(r)
		if !ok {
			t.Fatal("no key")
		}
		first := c.Choose(h, nil)
		for range 3 {
			if again := c.Choose(h, nil); again != first {
				t.Fatalf("key %d: split %d then %d", i, first, again)
			}
		}
		v2 += first
	}
	if !within(v2, n, 0.10, 0.02) {
		t.Errorf("sticky: %d of %d keys on the 10%% split", v2, n)
	}
}

// TestSkip: a split that cannot serve sends its share to the others in
// proportion; when none can, the first choice stands.
func TestSkip(t *testing.T) {
	c, _ := New([]int{50, 30, 20})
	down1 := func(i int) bool { return i != 1 }
	counts := make([]int, 3)
	const n = 10000
	for range n {
		counts[c.Choose(c.Next(), down1)]++
	}
	if counts[1] != 0 || !within(counts[0], n, 50.0/70, 0.02) || !within(counts[2], n, 20.0/70, 0.02) {
		t.Errorf("split 1 down: counts %v", counts)
	}
	none := func(int) bool { return false }
	for range 100 {
		x := c.Next()
		if got, want := c.Choose(x, none), c.Choose(x, nil); got != want {
			t.Fatalf("none can serve: got %d, want the first choice %d", got, want)
		}
	}
	// Sticky keys of the splits still up keep their split.
	for x := uint64(0); x < 1<<20; x += 4099 {
		if first := c.Choose(x*golden, nil); first != 1 && c.Choose(x*golden, down1) != first {
			t.Fatalf("point %d moved off split %d, which is up", x, first)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		ws   []int
		want error
	}{
		{nil, ErrNoSplits},
		{[]int{0, 0}, ErrZeroWeight},
		{[]int{10, -1}, ErrWeight},
	} {
		if _, err := New(tc.ws); !errors.Is(err, tc.want) {
			t.Errorf("New(%v) = %v, want %v", tc.ws, err, tc.want)
		}
	}
	// Many splits use the binary search: each weight-1 split gets its share.
	ws := make([]int, 20)
	for i := range ws {
		ws[i] = 1
	}
	c, _ := New(ws)
	counts := make([]int, len(ws))
	for range 20000 {
		counts[c.Choose(c.Next(), nil)]++
	}
	for i, got := range counts {
		if got < 990 || got > 1010 {
			t.Errorf("split %d of 20: %d of 20000", i, got)
		}
	}
}

func TestChooseAllocs(t *testing.T) {
	c, _ := New([]int{90, 10})
	up := []bool{true, false}
	if n := testing.AllocsPerRun(100, func() { c.Choose(c.Next(), func(i int) bool { return up[i] }) }); n != 0 {
		t.Errorf("Choose allocates %v times", n)
	}
}

// BenchmarkChoose is the split decision of one request: the Weyl point
// and the scan of two weights; Sticky adds the cookie's hash.
func BenchmarkChoose(b *testing.B) {
	c, _ := New([]int{90, 10})
	b.Run("weighted", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			c.Choose(c.Next(), nil)
		}
	})
	b.Run("sticky", func(b *testing.B) {
		k, _ := balance.ParseHashKey("cookie:session")
		r := &http.Request{Header: http.Header{"Cookie": {"theme=dark; session=8a4f2c"}}}
		b.ReportAllocs()
		for range b.N {
			h, _ := k.Hash(r)
			c.Choose(h, nil)
		}
	})
	b.Run("skip", func(b *testing.B) {
		up := []bool{false, true}
		ok := func(i int) bool { return up[i] }
		b.ReportAllocs()
		for range b.N {
			c.Choose(c.Next(), ok)
		}
	})
}
