package retry

import (
	"testing"
	"time"
)

func TestParseCondition(t *testing.T) {
	for i, name := range ConditionNames() {
		c, ok := ParseCondition(name)
		if !ok || c != 1<<i || c.Label() != name || c.String() != name {
			t.Errorf("%q: %v %v, label %q", name, c, ok, c.Label())
		}
	}
	for _, bad := range []string{"", "5xx", "Reset", "connect_failure", "500"} {
		if _, ok := ParseCondition(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	if s := (ConnectFailure | Status503).String(); s != "connect-failure,503" {
		t.Errorf("set string %q", s)
	}
	if DefaultOn.String() != "connect-failure,refused-stream,reset" {
		t.Errorf("default on %q", DefaultOn)
	}
}

// TestRetry is the decision table: conditions that prove the backend never
// saw the request hold for every method; the others for idempotent methods
// only; never past the attempts, once a response byte reached the client,
// or when the body cannot be sent again.
func TestRetry(t *testing.T) {
	all := ConnectFailure | RefusedStream | Reset | Status502 | Status503 | Status504
	ok := func(c Condition, method string) Failure {
		return Failure{Condition: c, Method: method, Tries: 1, BodyKept: true}
	}
	for _, tc := range []struct {
		name string
		on   Condition
		f    Failure
		want bool
	}{
		{"connect failure, POST", DefaultOn, ok(ConnectFailure, "POST"), true},
		{"refused stream, PATCH", DefaultOn, ok(RefusedStream, "PATCH"), true},
		{"reset on by default, GET", DefaultOn, ok(Reset, "GET"), true},
		{"reset on by default, POST", DefaultOn, ok(Reset, "POST"), false},
		{"reset off", ConnectFailure | RefusedStream, ok(Reset, "GET"), false},
		{"reset, GET", Reset, ok(Reset, "GET"), true},
		{"reset, PUT", Reset, ok(Reset, "PUT"), true},
		{"reset, DELETE", Reset, ok(Reset, "DELETE"), true},
		{"reset, POST", all, ok(Reset, "POST"), false},
		{"reset, PATCH", all, ok(Reset, "PATCH"), false},
		{"503, GET", Status503, ok(Status503, "GET"), true},
		{"503 when only 502 is on", Status502, ok(Status503, "GET"), false},
		{"504, POST", all, ok(Status504, "POST"), false},
		{"504, HEAD", Status504, ok(Status504, "HEAD"), true},
		{"unknown method", all, ok(Reset, "PURGE"), false},
		{"no condition", all, ok(0, "GET"), false},
		{"connect failure off", Reset, ok(ConnectFailure, "GET"), false},
		{"attempts used", all, Failure{Condition: ConnectFailure, Method: "GET", Tries: 2, BodyKept: true}, false},
		{"response started", all, Failure{Condition: Reset, Method: "GET", Tries: 1, Started: true, BodyKept: true}, false},
		{"body lost", all, Failure{Condition: ConnectFailure, Method: "POST", Tries: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Default()
			p.On = tc.on
			if got := p.Retry(tc.f); got != tc.want {
				t.Fatalf("Retry(%+v) with on %v = %v, want %v", tc.f, tc.on, got, tc.want)
			}
		})
	}
	p := Default()
	p.Attempts = 3
	if !p.Retry(Failure{Condition: ConnectFailure, Method: "GET", Tries: 2, BodyKept: true}) {
		t.Error("attempts = 3: no second retry")
	}
}

func TestWait(t *testing.T) {
	p := Default()
	for _, tc := range []struct {
		n    int
		ceil time.Duration
	}{{0, 25 * time.Millisecond}, {1, 25 * time.Millisecond}, {2, 50 * time.Millisecond}, {3, 100 * time.Millisecond},
		{4, 200 * time.Millisecond}, {5, 250 * time.Millisecond}, {40, 250 * time.Millisecond}, {64, 250 * time.Millisecond}} {
		if d := p.Wait(tc.n, ^uint64(0)); d >= tc.ceil || d < tc.ceil-time.Millisecond {
			t.Errorf("Wait(%d, max) = %v, want just under %v", tc.n, d, tc.ceil)
		}
		if d := p.Wait(tc.n, 0); d != 0 {
			t.Errorf("Wait(%d, 0) = %v, want 0", tc.n, d)
		}
	}
}

// TestBudget: Envoy's retry_budget arithmetic.
func TestBudget(t *testing.T) {
	b := Budget{Percent: 20, MinConcurrency: 3}
	for _, tc := range []struct {
		inFlight, active int64
		want             bool
	}{
		{0, 0, true}, {2, 0, true}, {3, 0, false}, {3, 10, false}, {3, 20, true},
		{9, 50, true}, {10, 50, false}, {19, 100, true}, {20, 100, false},
	} {
		if got := b.Allows(tc.inFlight, tc.active); got != tc.want {
			t.Errorf("Allows(%d in flight, %d active) = %v, want %v (limit %d)", tc.inFlight, tc.active, got, tc.want, b.Limit(tc.active))
		}
	}
	if (Budget{Percent: 0, MinConcurrency: 0}).Allows(0, 1000) {
		t.Error("a zero budget allowed a retry")
	}
	if !(Budget{Percent: 100}).Allows(99, 100) {
		t.Error("100% of 100 refused the 100th")
	}
}

func TestValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Policy){
		"attempts 0":      func(p *Policy) { p.Attempts = 0 },
		"attempts 11":     func(p *Policy) { p.Attempts = 11 },
		"unknown on":      func(p *Policy) { p.On = 1 << 7 },
		"negative try":    func(p *Policy) { p.PerTryTimeout = -1 },
		"zero backoff":    func(p *Policy) { p.Backoff = 0 },
		"max < base":      func(p *Policy) { p.MaxBackoff = time.Millisecond },
		"negative body":   func(p *Policy) { p.MaxBodyBytes = -1 },
		"budget 101%":     func(p *Policy) { p.Budget.Percent = 101 },
		"negative min":    func(p *Policy) { p.Budget.MinConcurrency = -1 },
		"negative budget": func(p *Policy) { p.Budget.Percent = -1 },
	} {
		p := Default()
		mut(&p)
		if p.Validate() == nil {
			t.Errorf("%s: valid", name)
		}
	}
}

func TestHedge(t *testing.T) {
	h := Hedge{Delay: 50 * time.Millisecond, Max: 1}
	for _, tc := range []struct {
		method string
		body   bool
		want   bool
	}{{"GET", false, true}, {"HEAD", false, true}, {"OPTIONS", false, true}, {"GET", true, false},
		{"POST", false, false}, {"PUT", false, false}, {"DELETE", false, false}} {
		if got := h.Applies(tc.method, tc.body); got != tc.want {
			t.Errorf("Applies(%s, body %v) = %v", tc.method, tc.body, got)
		}
	}
	if (Hedge{}).Applies("GET", false) {
		t.Error("the zero Hedge hedges")
	}
	for sent, want := range []bool{true, false, false} {
		if got := h.Next(sent); got != want {
			t.Errorf("max 1: Next(%d) = %v", sent, got)
		}
	}
	if (Hedge{}).Next(0) || !(Hedge{Delay: 1, Max: 3}).Next(2) {
		t.Error("Next ignores On or Max")
	}
	for name, bad := range map[string]Hedge{"no delay": {Max: 1}, "max 0": {Delay: time.Millisecond}, "max 6": {Delay: time.Millisecond, Max: 6}} {
		if bad.Validate() == nil {
			t.Errorf("%s: valid", name)
		}
	}
	if (Hedge{}).Validate() != nil || h.Validate() != nil {
		t.Error("valid hedges refused")
	}
}

// BenchmarkDecisions is the policies' cost on a request where nothing
// triggers: a failure check on success is not made; what runs is Hedge.Applies
// and, for a failed try, Retry.
func BenchmarkDecisions(b *testing.B) {
	p, h := Default(), Hedge{}
	f := Failure{Condition: Reset, Method: "GET", Tries: 1, BodyKept: true}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if h.Applies("GET", false) {
			n++
		}
		if p.Retry(f) {
			n++
		}
		if p.Budget.Allows(1, 10) {
			n++
		}
	}
	_ = n
}
