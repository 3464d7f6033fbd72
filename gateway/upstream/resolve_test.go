package upstream

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fakeDNS answers lookups from a script of steps; the last step repeats.
type fakeDNS struct {
	mu    sync.Mutex
	steps []dnsStep
	calls int
}

type dnsStep struct {
	addrs []string
	err   error
}

func (f *fakeDNS) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.steps[min(f.calls, len(f.steps)-1)]
	f.calls++
	if st.err != nil {
		return nil, st.err
	}
	var out []netip.Addr
	for _, a := range st.addrs {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

func TestDNSRefreshClassification(t *testing.T) {
	dns := &fakeDNS{steps: []dnsStep{
		{addrs: []string{"10.0.0.2", "10.0.0.1"}},
		{addrs: []string{"10.0.0.1", "10.0.0.2"}},
		{addrs: nil},
		{err: errors.New("i/o timeout")},
		{addrs: []string{"10.0.0.3"}},
	}}
	r := newResolver("backend.internal", 8080)
	if r.usable() {
		t.Fatal("unresolved hostname usable")
	}
	rotations := 0
	rotate := func() { rotations++ }
	want := []struct {
		outcome   string
		addrs     string
		rotations int
		gen       uint64
	}{
		{DNSChanged, "10.0.0.1,10.0.0.2", 0, 1}, // first answer: nothing to rotate
		{DNSUnchanged, "10.0.0.1,10.0.0.2", 0, 1},
		{DNSEmpty, "10.0.0.1,10.0.0.2", 0, 1}, // last usable set kept
		{DNSFailed, "10.0.0.1,10.0.0.2", 0, 1},
		{DNSChanged, "10.0.0.3", 1, 2},
	}
	for i, w := range want {
		got := r.refresh(context.Background(), dns, rotate)
		s := r.snapshot()
		var addrs []string
		for _, a := range s.Addresses {
			addrs = append(addrs, a.String())
		}
		if got != w.outcome || join(addrs) != w.addrs || rotations != w.rotations || s.Generation != w.gen || !r.usable() {
			t.Fatalf("step %d: outcome %s addrs %v rotations %d gen %d; want %+v", i, got, addrs, rotations, s.Generation, w)
		}
		if w.outcome == DNSFailed && s.LastError == "" {
			t.Fatalf("step %d: failure not recorded", i)
		}
	}
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

// TestHostnameBackendDialsResolvedAddress: a hostname backend becomes
// eligible once resolved and is reached at the resolved address.
func TestHostnameBackendDialsResolvedAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Host) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	dns := &fakeDNS{steps: []dnsStep{{addrs: []string{"127.0.0.1"}}}}
	u, err := New(Config{Name: "web", Resolver: dns, DNSRefresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := u.SetStatic([]Spec{{ID: "a", Scheme: "http", Host: "backend.internal", Port: p, Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	b := u.Current().Backends[0]
	deadline := time.Now().Add(5 * time.Second)
	for !b.Eligible() {
		if time.Now().After(deadline) {
			t.Fatal("hostname backend never became eligible")
		}
		time.Sleep(time.Millisecond)
	}
	req, _ := http.NewRequest("GET", "http://backend.internal:"+port+"/", nil)
	resp, err := b.Transport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "backend.internal:"+port {
		t.Fatalf("backend saw Host %q", body)
	}
	if res := b.Resolution(); res.Kind != "hostname" || res.LastOutcome != DNSChanged || len(res.Addresses) != 1 {
		t.Fatalf("resolution %+v", res)
	}
}
