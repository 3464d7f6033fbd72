package gateway

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/headers"
)

// benchSplitConfig is memUpstream's "web" routing "/" 90/10 to two more
// in-memory upstreams, web-v1 and web-v2 (sticky when key is not "").
func benchSplitConfig(sticky string) Config {
	web, v1, v2 := memUpstream(2), memUpstream(2), memUpstream(2)
	v1.Name, v2.Name = "web-v1", "web-v2"
	v1.Routes[0].PathPrefix, v2.Routes[0].PathPrefix = "/v1/", "/v2/"
	web.Routes[0].Splits = []SplitConfig{{"web-v1", 90}, {"web-v2", 10}}
	web.Routes[0].Sticky = sticky
	return Config{Upstreams: []UpstreamConfig{web, v1, v2}}
}

// BenchmarkSplitChoice is the split stage alone on a 90/10 route (the
// weighted point, the chosen upstream's backends looked at), by weight
// and sticky by a cookie (README "Performance").
func BenchmarkSplitChoice(b *testing.B) {
	for _, sticky := range []string{"", "cookie:session"} {
		name := "weighted"
		if sticky != "" {
			name = "sticky"
		}
		b.Run(name, func(b *testing.B) {
			g, _ := benchGateway(b, benchSplitConfig(sticky))
			tbl := g.table.Load()
			rec := recorder{edge: tbl.edgeOf(tbl.routes.Match("example.com", "/small", "GET"))}
			r := benchRequest()
			r.Header.Set("Cookie", "theme=dark; session=8a4f2c")
			web := tbl.upstreams["web"]
			b.ReportAllocs()
			for b.Loop() {
				if rec.splitUpstream(r, web) == web {
					b.Fatal("no split")
				}
			}
		})
	}
}

// BenchmarkHandlerSplit is BenchmarkHandler on a route split 90/10: the
// whole handler's cost of the split (no allocation of its own).
func BenchmarkHandlerSplit(b *testing.B) {
	_, h := benchGateway(b, benchSplitConfig(""))
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(&discardWriter{h: http.Header{}}, benchRequest().WithContext(b.Context()))
	}
}

// BenchmarkRouteRulesSplit is BenchmarkRouteRules on a route that also
// splits 90/10 (issue 24's budget: strip_prefix, three header rules and a
// split in at most 1 µs of CPU per request).
func BenchmarkRouteRulesSplit(b *testing.B) {
	cfg := benchSplitConfig("")
	rt := benchRulesRoute()
	rt.Splits = cfg.Upstreams[0].Routes[0].Splits
	cfg.Upstreams[0].Routes = append(cfg.Upstreams[0].Routes, rt)
	g, _ := benchGateway(b, cfg)
	tbl := g.table.Load()
	e := tbl.edgeOf(tbl.routes.Match("example.com", "/api/users/42", "GET"))
	if e == nil || e.split == nil || e.rewrite == nil {
		b.Fatal("route without its rules and split")
	}
	u, _ := url.Parse("/api/users/42?x=1")
	r := &http.Request{Method: "GET", URL: u, RequestURI: "/api/users/42?x=1", Host: "example.com", RemoteAddr: "192.0.2.7:40000",
		Header: http.Header{"Accept": {"*/*"}, "X-Debug": {"1"}}}
	respH := http.Header{"Content-Type": {"application/json"}}
	rec := recorder{g: &Gateway{}, r: r, edge: e}
	rec.out.Route = "/api/"
	web := tbl.upstreams["web"]
	b.ReportAllocs()
	for b.Loop() {
		r.URL, rec.hvars = u, headers.Vars{}
		if rec.splitUpstream(r, web) == web {
			b.Fatal("no split")
		}
		if !rec.forwardRules(nil, r, nil, "/api/users/42") {
			b.Fatal("refused")
		}
		rec.corsFields(respH)
	}
}
