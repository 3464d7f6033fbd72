package gateway

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/headers"
	"github.com/impulse-agent/impulse-agent/gateway/rewrite"
)

// benchRulesRoute is a route with strip_prefix and three header rules:
// a fixed set, a set with a variable, a remove (request); and a fixed
// response set.
func benchRulesRoute() RouteConfig {
	return RouteConfig{PathPrefix: "/api/", Rewrite: rewrite.Config{StripPrefix: true},
		RequestHeaders:  headers.Config{Set: map[string]string{"X-Env": "prod", "X-Client": "{client_ip}"}, Remove: []string{"X-Debug"}},
		ResponseHeaders: headers.Config{Set: map[string]string{"Strict-Transport-Security": "max-age=63072000"}}}
}

// BenchmarkRouteRules is the CPU the path and header stages cost one
// request on a route with strip_prefix and three header rules (README
// "Performance": at most 1 µs): the path rewritten, the request's fields
// changed, the response's field set; no network, no handler.
func BenchmarkRouteRules(b *testing.B) {
	rl, err := buildRules(benchRulesRoute())
	if err != nil {
		b.Fatal(err)
	}
	e := &routeEdge{rules: rl}
	u, _ := url.Parse("/api/users/42?x=1")
	r := &http.Request{Method: "GET", URL: u, RequestURI: "/api/users/42?x=1", Host: "example.com", RemoteAddr: "192.0.2.7:40000",
		Header: http.Header{"Accept": {"*/*"}, "X-Debug": {"1"}}}
	respH := http.Header{"Content-Type": {"application/json"}}
	rec := recorder{g: &Gateway{}, r: r, edge: e}
	rec.out.Route = "/api/"
	b.ReportAllocs()
	for b.Loop() {
		r.URL, rec.hvars = u, headers.Vars{}
		if !rec.forwardRules(nil, r, nil, "/api/users/42") {
			b.Fatal("refused")
		}
		rec.corsFields(respH)
	}
	if r.URL.Path != "/users/42" || r.Header.Get("X-Client") != "192.0.2.7" || r.Header.Get("X-Debug") != "" {
		b.Fatalf("%v %v", r.URL, r.Header)
	}
}

// BenchmarkHandlerRouteRules is BenchmarkHandler on a route with
// strip_prefix and the header rules of BenchmarkRouteRules: the whole
// handler's cost of them.
func BenchmarkHandlerRouteRules(b *testing.B) {
	uc := memUpstream(2)
	rt := benchRulesRoute()
	rt.PathPrefix = "/"
	uc.Routes[0] = rt
	_, h := benchGateway(b, Config{Upstreams: []UpstreamConfig{uc}})
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(&discardWriter{h: http.Header{}}, benchRequest().WithContext(b.Context()))
	}
}
