package headers

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestRulesApply(t *testing.T) {
	r, err := New(Config{
		Set:    map[string]string{"X-Env": "prod", "X-Client": "{client_ip} id={request_id}", "X_Route": "{scheme}://{host}{route}"},
		Add:    map[string]string{"Via": "impulse", "X-Lit": `{"a":1} {not_closed`},
		Remove: []string{"X-Debug", "server"},
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	shared := []string{"1.1 proxy"}
	h := http.Header{"X-Debug": {"1"}, "Server": {"s"}, "X-Env": {"dev"}, "Via": shared}
	r.Apply(h, &Vars{ClientIP: "192.0.2.1", RequestID: "r1", Host: "h.example.com", Scheme: "https", Route: "/api/"})
	want := http.Header{"X-Env": {"prod"}, "X-Client": {"192.0.2.1 id=r1"}, "X_route": {"https://h.example.com/api/"},
		"Via": {"1.1 proxy", "impulse"}, "X-Lit": {`{"a":1} {not_closed`}}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("got %v, want %v", h, want)
	}
	if len(shared) != 1 || cap(shared) != 1 {
		t.Error("add modified a shared slice")
	}
	if r, err := New(Config{}, true); r != nil || err != nil {
		t.Errorf("empty: %v %v", r, err)
	}
}

func TestRulesRefused(t *testing.T) {
	for _, c := range []struct {
		cfg     Config
		request bool
		want    string
	}{
		{Config{Set: map[string]string{"Host": "x"}}, true, "Host"},
		{Config{Set: map[string]string{":path": "/x"}}, true, "pseudo-header"},
		{Config{Remove: []string{":authority"}}, false, "pseudo-header"},
		{Config{Set: map[string]string{"Connection": "close"}}, false, "hop-by-hop"},
		{Config{Add: map[string]string{"transfer_encoding": "chunked"}}, false, "framing"},
		{Config{Set: map[string]string{"Content-Length": "1"}}, true, "framing"},
		{Config{Set: map[string]string{"X_Forwarded_For": "1.2.3.4"}}, true, "X_Forwarded_For"},
		{Config{Set: map[string]string{"X-Request-Id": "1"}}, false, "request ID"},
		{Config{Set: map[string]string{"X Bad": "1"}}, true, "not a field name"},
		{Config{Set: map[string]string{"X-A": "a\nb"}}, true, "field value"},
		{Config{Set: map[string]string{"X-A": " a"}}, true, "field value"},
		{Config{Set: map[string]string{"X-A": "{client_addr}"}}, true, "not a variable"},
	} {
		_, err := New(c.cfg, c.request)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	// X-Forwarded-For is the gateway's on requests only.
	if _, err := New(Config{Set: map[string]string{"X-Forwarded-For": "x"}}, false); err != nil {
		t.Errorf("response X-Forwarded-For: %v", err)
	}
}
