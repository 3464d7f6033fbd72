package edgerules

import "testing"

func TestChecks(t *testing.T) {
	for in, want := range map[string]string{
		"https://App.Example.com":     "https://app.example.com",
		"https://app.example.com:443": "https://app.example.com",
		"http://app.example.com:80":   "http://app.example.com",
		"http://app.example.com:8080": "http://app.example.com:8080",
		"http://[::1]:3000":           "http://[::1]:3000",
		"chrome-extension://abcdef":   "chrome-extension://abcdef",
	} {
		if got, why := CheckOrigin(in); got != want || why != "" {
			t.Errorf("CheckOrigin(%q) = %q, %q; want %q", in, got, why, want)
		}
	}
	for _, bad := range []string{"", "null", "*", "app.example.com", "https://a.example/", "https://a.example?x", "https://a.example#",
		"https://u@a.example", "https://a.example:0", "https://a.example:x", "https://*.a.example", "https://", "mailto:x@y"} {
		if _, why := CheckOrigin(bad); why == "" {
			t.Errorf("CheckOrigin(%q) accepted", bad)
		}
	}
	for m, ok := range map[string]bool{"GET": true, "PATCH": true, "PURGE": true, "put": false, "Patch": false, "TRACE": false,
		"connect": false, "G T": false, "": false, "*": false} {
		if got := CheckMethod(m) == ""; got != ok {
			t.Errorf("CheckMethod(%q) ok = %v", m, got)
		}
	}
	for typ, ok := range map[string]bool{"application/json": true, "text/*": true, "image/svg+xml": true, "*/*": false,
		"json": false, "text/html; charset=utf-8": false, "text/": false, "/json": false} {
		if got := CheckMediaType(typ) == ""; got != ok {
			t.Errorf("CheckMediaType(%q) ok = %v", typ, got)
		}
	}
	if CheckHeader("X-Api-Key") != "" || CheckHeader("X Key") == "" || CheckHeader("") == "" {
		t.Error("CheckHeader")
	}
}
