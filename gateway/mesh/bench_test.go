package mesh

import (
	"fmt"
	"net/http"
	"testing"
)

// twentyL7 is 20 L7 intentions, one per source svc-0 … svc-19, each with
// a prefix+method, a regex and a header permission, then a "*" deny: the
// issue's benchmark shape. The request of svc-19 is decided by its last
// permission, after every other source and permission was tried.
func twentyL7() []Intention {
	var ints []Intention
	for i := range 20 {
		ints = append(ints, Intention{ID: fmt.Sprint("svc-", i), SourceNS: "default", SourceName: fmt.Sprint("svc-", i),
			DestinationNS: "default", DestinationName: "web", Precedence: 9, Permissions: []Permission{
				{Action: "allow", HTTP: &HTTPMatch{PathPrefix: "/api/v1/", Methods: []string{"GET", "HEAD"}}},
				{Action: "deny", HTTP: &HTTPMatch{PathRegex: "/admin(/.*)?"}},
				{Action: "allow", HTTP: &HTTPMatch{PathPrefix: "/ops/", Header: []HeaderMatch{{Name: "X-Role", Exact: "ops"}}}},
			}})
	}
	return append(ints, Intention{ID: "star", SourceNS: "default", SourceName: "*", DestinationNS: "default", DestinationName: "web", Action: "deny"})
}

func benchRequest() *Request {
	return &Request{Method: "POST", Path: "/ops/restart", Host: "web",
		Header: http.Header{"X-Role": {"ops"}, "Accept": {"*/*"}, "User-Agent": {"bench"}}}
}

// TestAuthorizeDoesNotAllocate: the decision on the request path makes no
// allocation, with 20 L7 intentions (the budget: 0 allocations).
func TestAuthorizeDoesNotAllocate(t *testing.T) {
	r := mustCompile(t, twentyL7(), false)
	id, rq := src("svc-19"), benchRequest()
	if d := r.Authorize(id, rq); !d.Allow || d.Permission != 2 {
		t.Fatalf("decision %+v, want the third permission's allow", d)
	}
	if n := testing.AllocsPerRun(200, func() { r.Authorize(id, rq); r.AuthorizeConn(id) }); n != 0 {
		t.Fatalf("%v allocations per decision, want 0", n)
	}
}

func BenchmarkAuthorize(b *testing.B) {
	r, _ := Compile(twentyL7(), false)
	id, rq := src("svc-19"), benchRequest()
	b.ReportAllocs()
	for b.Loop() {
		if !r.Authorize(id, rq).Allow {
			b.Fatal("denied")
		}
	}
}

func BenchmarkAuthorizeConn(b *testing.B) {
	r, _ := Compile(twentyL7(), false)
	id := src("svc-19")
	b.ReportAllocs()
	for b.Loop() {
		r.AuthorizeConn(id)
	}
}
