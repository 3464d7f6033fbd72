package hcl

import (
	"strings"
	"testing"
	"time"
)

// TestRouteRules: strip_prefix, prefix_rewrite, header rules and
// redirect convert; an upstream's header blocks are its routes' default;
// an upstream whose every route redirects needs no backend.
func TestRouteRules(t *testing.T) {
	src := testListener + `upstream "api" {
  response_headers { set = { "Strict-Transport-Security" = "max-age=63072000" } }
  route {
    path_prefix  = "/api/"
    strip_prefix = true
    request_headers {
      set    = { "X-Env" = "prod", X_Client = "{client_ip} {request_id}" }
      add    = { "Via" = "impulse" }
      remove = ["X-Debug"]
    }
  }
  route {
    path_prefix    = "/v1/"
    prefix_rewrite = "/internal/v1/"
    response_headers { remove = ["Server"] }
  }
  backend "b" { address = "http://127.0.0.1:8080" }
}
upstream "moved" {
  route {
    path_prefix = "/old/"
    redirect { to = "https://new.example.com/new/" }
  }
  route {
    path_prefix = "/gone/"
    redirect {
      to          = "https://new.example.com"
      code        = 301
      strip_query = true
    }
  }
}
`
	cfg := mustParse(t, src)
	api, moved := cfg.Upstreams[0], cfg.Upstreams[1]
	a, v1 := api.Routes[0], api.Routes[1]
	if !a.StripPrefix || a.PrefixRewrite != "" || v1.PrefixRewrite != "/internal/v1/" || v1.StripPrefix {
		t.Errorf("rewrites: %+v %+v", a, v1)
	}
	if h := a.RequestHeaders; h == nil || h.Set["X-Env"] != "prod" || h.Set["X_Client"] != "{client_ip} {request_id}" ||
		h.Add["Via"] != "impulse" || len(h.Remove) != 1 || h.Remove[0] != "X-Debug" {
		t.Errorf("request_headers = %+v", a.RequestHeaders)
	}
	if a.ResponseHeaders != api.ResponseHeaders || v1.ResponseHeaders == api.ResponseHeaders || v1.ResponseHeaders.Remove[0] != "Server" {
		t.Errorf("response_headers: %+v %+v", a.ResponseHeaders, v1.ResponseHeaders)
	}
	if d := moved.Routes[0].Redirect; d == nil || d.To != "https://new.example.com/new/" || d.Code != 308 || d.StripQuery {
		t.Errorf("redirect = %+v", d)
	}
	if d := moved.Routes[1].Redirect; d == nil || d.Code != 301 || !d.StripQuery {
		t.Errorf("redirect = %+v", d)
	}
	if len(moved.Backends) != 0 || moved.Consul != nil {
		t.Errorf("moved: %+v", moved)
	}
}

// TestRouteRuleErrors: every bad path, header or redirect rule is an
// error at file:line:column of the value (or the key), naming the field.
func TestRouteRuleErrors(t *testing.T) {
	for _, tc := range []struct {
		body, at, want string
	}{
		{`prefix_rewrite = "internal/"`, `"internal/"`, `upstream "api" route prefix_rewrite: "internal/" does not start with "/"`},
		{`prefix_rewrite = "/a/../b"`, `"/a/../b"`, `is not in normal form; write "/b"`},
		{`prefix_rewrite = "/a//b"`, `"/a//b"`, "empty segment"},
		{`prefix_rewrite = "/a%2Fb"`, `"/a%2Fb"`, "invalid path"},
		{"strip_prefix = true\n prefix_rewrite = \"/x/\"", `"/x/"`, "Conflicting rewrites"},
		{`strip_prefix = "yes"`, `"yes"`, "Invalid value type"},
		{`request_headers { set = { "Host" = "x" } }`, `"Host"`, `route request_headers set: "Host" cannot be changed`},
		{`request_headers { set = { ":path" = "/x" } }`, `":path"`, "pseudo-header"},
		{`response_headers { remove = [":status"] }`, `":status"`, "pseudo-header"},
		{`request_headers { set = { "Connection" = "close" } }`, `"Connection"`, "hop-by-hop"},
		{`response_headers { add = { "Transfer_Encoding" = "chunked" } }`, `"Transfer_Encoding"`, "framing"},
		{`request_headers { set = { "X_Forwarded_For" = "1.2.3.4" } }`, `"X_Forwarded_For"`, `"X_Forwarded_For" cannot be changed on the request`},
		{`request_headers { remove = ["Content-Length"] }`, `"Content-Length"`, "framing"},
		{`request_headers { set = { "X Bad" = "1" } }`, `"X Bad"`, "is not a field name"},
		{`request_headers { set = { "X-A" = "a\nb" } }`, `"a\nb"`, "is not a field value"},
		{`request_headers { set = { "X-A" = "{client_addr}" } }`, `"{client_addr}"`, "{client_addr} is not a variable; use {client_ip}"},
		{"request_headers {\n set = { \"X-A\" = \"1\" }\n remove = [\"x-a\"]\n }", `"X-A"`, `"X-A" is already in remove`},
		{`request_headers { set = ["X-A"] }`, `["X-A"]`, "a map of field names"},
		{`request_headers { remove = "X-A" }`, `"X-A"`, "a list of field names"},
		{"request_headers {}\n request_headers {}", "2nd request_headers {", "Duplicate request_headers block"},
		{`redirect { to = "new.example.com" }`, `"new.example.com"`, `route redirect to: "new.example.com" has no scheme; write "https://new.example.com"`},
		{`redirect { to = "//new.example.com" }`, `"//new.example.com"`, "has no scheme"},
		{`redirect { to = "ftp://new.example.com" }`, `"ftp://new.example.com"`, "must be http or https"},
		{`redirect { to = "https://new.example.com/?a=1" }`, `"https://new.example.com/?a=1"`, "has a query"},
		{`redirect { to = "https://new.example.com/a/../b" }`, `"https://new.example.com/a/../b"`, "not in normal form"},
		{`redirect { to = "https://new.example.com/#top" }`, `"https://new.example.com/#top"`, "no fragment"},
		{`redirect { code = 301 }`, `redirect {`, "to is required"},
		{"redirect {\n to = \"https://a.example\"\n code = 303\n }", `303`, "303 is not a redirect status"},
		{"strip_prefix = true\n redirect { to = \"https://a.example\" }", `true`, "Rewrite on a redirect"},
		{"request_headers { set = { \"X-A\" = \"1\" } }\n redirect { to = \"https://a.example\" }", `request_headers {`, "Request headers on a redirect"},
	} {
		src := authUpstream("    " + tc.body)
		wantErrorAt(t, src, tc.at, tc.want, tc.body)
	}
	// An upstream with a route that does not redirect still needs backends.
	got := parseErrors(t, testListener+`upstream "m" {
  route {
    path_prefix = "/a/"
    redirect { to = "https://a.example" }
  }
  route { path_prefix = "/b/" }
}
`)
	if !strings.Contains(got, "No backends") {
		t.Errorf("mixed upstream without backends: %s", got)
	}
}

// TestRoutePolicies: a route's timeouts, retry and rate_limit convert
// (timeouts one by one, 0 for the upstream's); a route without them has
// none.
func TestRoutePolicies(t *testing.T) {
	u := mustParse(t, testListener+`upstream "api" {
  route {
    path_prefix = "/slow/"
    timeouts {
      request         = "60s"
      response_header = "5s"
    }
    retry { attempts = 3 }
    rate_limit { requests_per_second = 5 }
  }
  route { path_prefix = "/" }
  backend "b" { address = "http://127.0.0.1:8080" }
}
`).Upstreams[0]
	slow, plain := u.Routes[0], u.Routes[1]
	if tm := slow.Timeouts; tm == nil || tm.Request != 60*time.Second || tm.ResponseHeader != 5*time.Second || tm.BodyIdle != 0 {
		t.Errorf("timeouts = %+v", slow.Timeouts)
	}
	if r := slow.Retry; r == nil || r.Attempts != 3 || r.Backoff != DefaultRetryBackoff {
		t.Errorf("retry = %+v", slow.Retry)
	}
	if rl := slow.RateLimit; rl == nil || rl.RequestsPerSecond != 5 || rl.Burst != 5 {
		t.Errorf("rate_limit = %+v", slow.RateLimit)
	}
	if plain.Timeouts != nil || plain.Retry != nil || plain.RateLimit != nil {
		t.Errorf("a route without policies: %+v", plain)
	}
}

// TestRoutePolicyErrors: connect and idle are the upstream's; a route's
// response_header longer than the upstream's or than its own request
// timeout, and the blocks' own errors, at file:line:column.
func TestRoutePolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		body, at, want string
	}{
		{`timeouts { connect = "1s" }`, `"1s"`, `route timeouts connect: connect is a setting of the upstream's connections`},
		{`timeouts { idle = "1s" }`, `"1s"`, "Connection timeout on a route"},
		{`timeouts { response_header = "31s" }`, `"31s"`, "can only shorten its upstream's (30s)"},
		{"timeouts {\n request = \"1s\"\n response_header = \"2s\"\n }", `"2s"`, "must not be longer than the request timeout"},
		{`timeouts { request = "soon" }`, `"soon"`, "is not a duration"},
		{`retry { attempts = 0 }`, `0 }`, "route retry attempts: 0 is out of range"},
		{`retry { on = ["500"] }`, `"500"`, "is not a retry condition"},
		{`rate_limit { burst = 2 }`, `rate_limit {`, "Missing requests_per_second"},
		{"retry {}\n retry {}", "2nd retry {", "Duplicate retry block"},
	} {
		src := authUpstream("    " + tc.body)
		wantErrorAt(t, src, tc.at, tc.want, tc.body)
	}
}

// TestPathMatchKinds: path and path_regex convert (path_prefix then "");
// each of the three once; rewrites need a path_prefix; a regex must
// compile within its bounds; duplicates are judged per kind.
func TestPathMatchKinds(t *testing.T) {
	u := mustParse(t, testListener+`upstream "api" {
  route { path = "/api/health" }
  route { path_regex = "/api/users/[0-9]+" }
  route { path_prefix = "/api/health" }
  backend "b" { address = "http://127.0.0.1:8080" }
}
`).Upstreams[0]
	if r := u.Routes[0]; r.Path != "/api/health" || r.PathPrefix != "" || r.PathRegex != "" {
		t.Errorf("path: %+v", r)
	}
	if r := u.Routes[1]; r.PathRegex != "/api/users/[0-9]+" || r.PathPrefix != "" {
		t.Errorf("path_regex: %+v", r)
	}
	for _, tc := range []struct {
		body, at, want string
	}{
		{"path_prefix = \"/a/\"\n path = \"/x\"", `"/x"`, "route path: path_prefix and path are both set"},
		{"path = \"/y\"\n path_regex = \"/z\"", `"/z"`, "Conflicting path matches"},
		{`path = "a"`, `"a"`, `route path: `},
		{`path = "/a/../b"`, `"/a/../b"`, "Invalid path"},
		{`path_regex = "/a("`, `"/a("`, `route path_regex: "/a(": error parsing regexp: missing closing )`},
		{`path_regex = "(a)\\1"`, `"(a)\\1"`, "invalid escape sequence"},
		{`path_regex = "(?<=a)b"`, `"(?<=a)b"`, "error parsing regexp: invalid named capture: `(?<=a)b`"},
		{`path_regex = "((((a{0,50}){0,50}){0,50}){0,50})"`, `"((((`, "Invalid path_regex"},
		{"path = \"/a\"\n strip_prefix = true", `true`, "Rewrite without a prefix"},
		{"path_regex = \"/a\"\n prefix_rewrite = \"/b\"", `"/b"`, "Rewrite without a prefix"},
	} {
		src := authUpstream("    " + tc.body)
		_, diags := Parse("a.hcl", []byte(src))
		got := linesOf(diags)
		at := posOf(src, tc.at)
		if !diags.HasErrors() || !strings.Contains(got, "a.hcl:"+at+": ") || !strings.Contains(got, tc.want) {
			t.Errorf("%s:\n%s\nwant an error at a.hcl:%s containing %q", tc.body, got, at, tc.want)
		}
	}
	got := parseErrors(t, testListener+`upstream "api" {
  route { path = "/a" }
  route { path = "/a" }
  backend "b" { address = "http://127.0.0.1:8080" }
}
`)
	if !strings.Contains(got, `Duplicate route: upstream "api" route: host "" and path "/a" are already routed`) {
		t.Errorf("duplicate path: %s", got)
	}
}

// TestRoutingDefaultsWrittenOut: interface.md's route with every new
// argument at its default ("" for path, path_regex and prefix_rewrite,
// false for strip_prefix, empty header blocks) is a plain path_prefix
// route.
func TestRoutingDefaultsWrittenOut(t *testing.T) {
	rt := mustParse(t, authUpstream(`    path_prefix    = "/api/"
    path           = ""
    path_regex     = ""
    strip_prefix   = false
    prefix_rewrite = ""
    request_headers {
      set    = {}
      add    = {}
      remove = []
    }
    response_headers {
      set    = {}
      add    = {}
      remove = []
    }`)).Upstreams[0].Routes[0]
	if rt.PathPrefix != "/api/" || rt.Path != "" || rt.PathRegex != "" || rt.StripPrefix || rt.PrefixRewrite != "" ||
		len(rt.RequestHeaders.Set)+len(rt.RequestHeaders.Add)+len(rt.RequestHeaders.Remove) != 0 {
		t.Errorf("%+v", rt)
	}
	// And with a redirect, the rewrites written out at their defaults are no error.
	mustParse(t, authUpstream(`    strip_prefix   = false
    prefix_rewrite = ""
    redirect { to = "https://new.example.com" }`))
}
