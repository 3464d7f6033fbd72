package accesslog

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"strings"
	"testing"
	"testing/quick"
	"time"
)

func sampleEntry() Entry {
	return Entry{
		Start:    time.Date(2025, 3, 4, 5, 6, 7, 891_234_000, time.FixedZone("CET", 3600)),
		Duration: 12_345 * time.Microsecond, RequestID: "4bf92f3577b34da6a3ce929d0e0e4736", TraceID: "0af7651916cd43dd8448eb211c80319c",
		Listener: "public", Protocol: "h3", Proto: "HTTP/3.0", ClientAddress: "192.0.2.7:51234", Peer: "10.0.0.5:40000", SNI: "api.example.com",
		ClientCert: &x509.Certificate{Subject: pkix.Name{CommonName: "web-client", Organization: []string{"impulse tests"}}},
		Method:     "GET", Host: "api.example.com", Path: "/v1/items", Query: "token=secret&page=2",
		Status: 503, Reason: "no_healthy_backend", BytesIn: 17, BytesOut: 42,
		Upstream: "api", Backend: "api-1", Attempts: 2, UserAgent: `curl/8.5 "quoted"`, Referer: "https://example.com/",
		GRPCStatus: "UNAVAILABLE",
	}
}

// TestJSONLine: the fields, their names and order, the time in UTC with
// milliseconds; query only when asked for.
func TestJSONLine(t *testing.T) {
	e := sampleEntry()
	got := string(appendJSON(nil, &e, false))
	want := `{"time":"2025-03-04T04:06:07.891Z","request_id":"4bf92f3577b34da6a3ce929d0e0e4736","trace_id":"0af7651916cd43dd8448eb211c80319c",` +
		`"listener":"public","protocol":"h3","client_address":"192.0.2.7:51234","peer":"10.0.0.5:40000","tls_sni":"api.example.com",` +
		`"client_cert_subject":"CN=web-client,O=impulse tests","method":"GET","host":"api.example.com","path":"/v1/items",` +
		`"status":503,"reason":"no_healthy_backend","bytes_in":17,"bytes_out":42,"duration_ms":12.345,"upstream":"api","backend":"api-1",` +
		`"attempts":2,"user_agent":"curl/8.5 \"quoted\"","grpc_status":"UNAVAILABLE"}` + "\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["query"]; ok {
		t.Error("query logged without include_query")
	}
	withQuery := string(appendJSON(nil, &e, true))
	if !strings.Contains(withQuery, `"path":"/v1/items","query":"token=secret&page=2","status":503`) {
		t.Errorf("include_query: %s", withQuery)
	}
	e.ClientCert, e.GRPCStatus, e.TraceID = nil, "", ""
	m = nil
	if err := json.Unmarshal(appendJSON(nil, &e, false), &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["client_cert_subject"]; ok {
		t.Error("client_cert_subject without a certificate")
	}
	if _, ok := m["grpc_status"]; ok {
		t.Error("grpc_status for a call that is not gRPC")
	}
	if v, ok := m["trace_id"]; !ok || v != "" {
		t.Errorf("trace_id %v, want present and empty", v)
	}
}

// TestJSONStrings: any string comes out as encoding/json would have it
// (invalid UTF-8 as U+FFFD), and the line parses.
func TestJSONStrings(t *testing.T) {
	for _, s := range []string{"", "plain", "a\"b\\c", "\x00\x1f\x7f\n\r\t", "é✓😀", "\xff\xfe", "a\xc3", "\u2028\u2029", "</script>"} {
		checkJSONString(t, s)
	}
	if err := quick.Check(func(s string) bool { return checkJSONString(t, s) }, &quick.Config{MaxCount: 2000}); err != nil {
		t.Error(err)
	}
	if err := quick.Check(func(b []byte) bool { return checkJSONString(t, string(b)) }, &quick.Config{MaxCount: 2000}); err != nil {
		t.Error(err)
	}
}

func checkJSONString(t *testing.T, s string) bool {
	t.Helper()
	var got, want string
	if err := json.Unmarshal(appendJSONString(nil, s), &got); err != nil {
		t.Errorf("%q: %v", s, err)
		return false
	}
	std, _ := json.Marshal(s)
	_ = json.Unmarshal(std, &want)
	if got != want {
		t.Errorf("%q: decoded %q, encoding/json gives %q", s, got, want)
		return false
	}
	return true
}

// TestCombinedLine: Apache's combined format, query only when asked for,
// "-" for empty values, quotes and bytes outside printable ASCII escaped.
func TestCombinedLine(t *testing.T) {
	e := sampleEntry()
	got := string(appendCombined(nil, &e, false))
	want := `192.0.2.7 - - [04/Mar/2025:04:06:07 +0000] "GET /v1/items HTTP/3.0" 503 42 "https://example.com/" "curl/8.5 \"quoted\""` + "\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if got := string(appendCombined(nil, &e, true)); !strings.Contains(got, `"GET /v1/items?token=secret&page=2 HTTP/3.0"`) {
		t.Errorf("include_query: %s", got)
	}
	e = Entry{Start: e.Start, ClientAddress: "[2001:db8::1]:443", Method: "GET", Path: "/a\"b\x01\xc3\xa9", Proto: "HTTP/1.1", Status: 404}
	got = string(appendCombined(nil, &e, false))
	want = `2001:db8::1 - - [04/Mar/2025:04:06:07 +0000] "GET /a\"b\x01\xc3\xa9 HTTP/1.1" 404 - "-" "-"` + "\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
