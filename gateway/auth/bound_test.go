package auth

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/impulse-agent/impulse-agent/internal/credfile"
)

// withCost is h with its cost field replaced: a hash bcrypt.Cost reads at
// cost, which no test has to compute.
func withCost(h []byte, cost int) []byte {
	return fmt.Appendf(nil, "%s%02d%s", h[:4], cost, h[6:])
}

// TestDummyMedianCost: an unknown user is compared with a hash at the
// file's median cost, not its highest.
func TestDummyMedianCost(t *testing.T) {
	h, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	users := func(costs ...int) []credfile.User {
		var out []credfile.User
		for i, c := range costs {
			out = append(out, credfile.User{Name: fmt.Sprint("u", i), Hash: withCost(h, c)})
		}
		return out
	}
	for _, tc := range []struct {
		costs []int
		want  int
	}{{[]int{10}, 10}, {[]int{14, 10, 10}, 10}, {[]int{10, 12, 14}, 12}, {[]int{4, 14}, 14}, {[]int{10, 10, 14, 14, 14}, 14}} {
		d := dummyOf(users(tc.costs...))
		if c, _ := bcrypt.Cost(d); c != tc.want {
			t.Errorf("costs %v: dummy of cost %d, want %d", tc.costs, c, tc.want)
		}
	}
	if dummyOf(nil) != nil {
		t.Error("no users: want no dummy")
	}
}

// TestBcryptBound: with every slot held, a comparison is refused at once
// (ResultBusy, nothing compared) while a cached credential still passes;
// the running count never exceeds the bound; a canceled request does not
// wait for its comparison, which keeps its slot until it ends.
func TestBcryptBound(t *testing.T) {
	defer SetBcryptSlots(1)()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	defer BeforeCompareHook(func() {
		once.Do(func() { close(entered); <-release })
	})()
	h, _ := bcrypt.GenerateFromPassword([]byte("pw-alice"), bcrypt.MinCost)
	b := newBasic(BasicConfig{Realm: "r", Users: []credfile.User{{Name: "alice", Hash: h}}})
	now := time.Now()
	ctx := context.Background()

	// Warm the cache first: the hook holds only the first comparison.
	cached := newBasic(BasicConfig{Realm: "r", Users: []credfile.User{{Name: "alice", Hash: h}}})
	cached.remember(cached.cacheKey("alice", "pw-alice"), "alice", now)

	held := make(chan string)
	go func() { r, _ := b.check(ctx, basicHeader("alice", "wrong"), now); held <- r }()
	<-entered
	for _, hdr := range []http.Header{basicHeader("alice", "wrong"), basicHeader("mallory", "x"), basicHeader("alice", "pw-alice")} {
		if res, _ := b.check(ctx, hdr, now); res != ResultBusy {
			t.Errorf("slot held: %s, want %s", res, ResultBusy)
		}
	}
	if res, sub := cached.check(ctx, basicHeader("alice", "pw-alice"), now); res != ResultOK || sub != "alice" {
		t.Errorf("cached credential while the slot is held: %s %q", res, sub)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if res, _ := b.check(cctx, basicHeader("alice", "wrong"), now); res != ResultBusy && res != ResultCanceled {
		t.Errorf("canceled: %s", res)
	}
	close(release)
	if r := <-held; r != ResultDenied {
		t.Errorf("held comparison: %s, want %s", r, ResultDenied)
	}
	// Free again: a right password passes (the slot was released).
	for {
		if running, _ := BcryptStats(); running == 0 {
			break
		}
		runtime.Gosched() // the first check (canceled) may still hold it
	}
	if res, _ := b.check(ctx, basicHeader("alice", "pw-alice"), now); res != ResultOK {
		t.Errorf("after release: %s", res)
	}
	if _, most := BcryptStats(); most != 1 {
		t.Errorf("peak %d comparisons at once, bound 1", most)
	}
	// A canceled request returns while its comparison runs on.
	release2 := make(chan struct{})
	restore := BeforeCompareHook(func() { <-release2 })
	cctx, cancel = context.WithCancel(ctx)
	out := make(chan string)
	go func() { r, _ := b.check(cctx, basicHeader("alice", "wrong2"), now); out <- r }()
	for {
		if running, _ := BcryptStats(); running == 1 {
			break
		}
		runtime.Gosched()
	}
	cancel()
	if r := <-out; r != ResultCanceled {
		t.Errorf("canceled during the comparison: %s", r)
	}
	close(release2)
	restore()
}

func TestDefaultBcryptSlots(t *testing.T) {
	if n := DefaultBcryptSlots(); n < 1 {
		t.Errorf("DefaultBcryptSlots() = %d", n)
	}
}

// TestCredentialSpellings: optional whitespace around a key or a Basic
// value is not part of it; on success every spelling of the credential
// fields (X_Api_Key, x-api_key...) is removed from the request.
func TestCredentialSpellings(t *testing.T) {
	p, err := New(Config{APIKeys: &APIKeysConfig{Header: "X-Api-Key", Keys: keysOf("key-0000000000000000")}}, Shared{})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := http.NewRequest("GET", "/", nil)
	r.Header = http.Header{"X-Api-Key": {" \tkey-0000000000000000  "}, "X_api_key": {"forged"}, "X_API_KEY": {"forged"}, "x-api_key": {"f"}, "X-Other": {"o"}}
	if d := p.Authenticate(context.Background(), r, "/"); !d.OK() {
		t.Fatalf("key with OWS: %v", d.Last())
	}
	if len(r.Header) != 1 || r.Header.Get("X-Other") != "o" {
		t.Errorf("after success: %v, want only X-Other", r.Header)
	}
	a := newAPIKeys(APIKeysConfig{Header: "X-Api-Key", Keys: keysOf("key-0000000000000000")})
	if res, _ := a.check(http.Header{"X-Api-Key": {"  "}}); res != ResultMissing {
		t.Errorf("blank key: %s", res)
	}
	if _, _, ok := parseBasic("  Basic YTpi \t"); !ok {
		t.Error("Basic with OWS refused")
	}
}
