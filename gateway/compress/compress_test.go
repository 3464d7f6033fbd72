package compress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

var all = []Coding{Zstd, Brotli, Gzip}

// TestNegotiate: RFC 9110 §12.5.3's Accept-Encoding, q-values, "*",
// identity, x-gzip, malformed entries.
func TestNegotiate(t *testing.T) {
	for _, c := range []struct {
		accept  []string // nil: absent
		offered []Coding
		want    Coding
		refused bool
	}{
		{nil, all, None, false},
		{[]string{""}, all, None, false},
		{[]string{"gzip"}, all, Gzip, false},
		{[]string{"gzip, deflate, br, zstd"}, all, Zstd, false},
		{[]string{"gzip, deflate, br"}, all, Brotli, false},
		{[]string{"br;q=1, gzip;q=0.5"}, all, Brotli, false},
		{[]string{"br;q=0.5, gzip;q=1"}, all, Gzip, false},
		{[]string{"br;q=1, gzip;q=1"}, []Coding{Gzip, Brotli}, Gzip, false}, // a tie: the route's order
		{[]string{"gzip;q=0"}, all, None, false},
		{[]string{"GZIP;Q=0.8"}, all, Gzip, false},
		{[]string{"x-gzip"}, all, Gzip, false},
		{[]string{"*"}, all, Zstd, false},
		{[]string{"*;q=0.5, br;q=0"}, []Coding{Brotli, Gzip}, Gzip, false},
		{[]string{"*;q=0"}, all, None, true},
		{[]string{"identity;q=0"}, all, None, true},
		{[]string{"gzip, identity;q=0"}, all, Gzip, true},
		{[]string{"*;q=0, identity"}, all, None, false},
		{[]string{"gzip;q=0.5, identity;q=1"}, all, None, false}, // the client prefers it as it is
		{[]string{"gzip;q=0.5, identity;q=0.5"}, all, Gzip, false},
		{[]string{"gzip;q=2"}, all, None, false},      // malformed: ignored
		{[]string{"gzip;q=0.1234"}, all, None, false}, // four digits
		{[]string{"gzip;q=1.5"}, all, None, false},
		{[]string{"gzip;q=1.000"}, all, Gzip, false},
		{[]string{"gzip;q=.5"}, all, None, false},
		{[]string{"gzip;level=9;q=0.3"}, all, Gzip, false},
		{[]string{"gzip;q=0.5, gzip;q=0"}, all, Gzip, false}, // the first entry counts
		{[]string{"deflate", "gzip"}, all, Gzip, false},      // several field lines
		{[]string{" ,, br ,"}, all, Brotli, false},
		{[]string{"zstd"}, []Coding{Gzip}, None, false},
		{[]string{"gzip\t;\tq=0.9"}, all, Gzip, false},
	} {
		got, refused := Negotiate(c.accept, c.offered)
		if got != c.want || refused != c.refused {
			t.Errorf("Negotiate(%q, %v) = %v, %v; want %v, %v", c.accept, c.offered, got, refused, c.want, c.refused)
		}
	}
}

func TestNegotiateAllocs(t *testing.T) {
	v := []string{"gzip, deflate, br;q=0.9, zstd;q=0.8, *;q=0.1"}
	if n := testing.AllocsPerRun(100, func() { Negotiate(v, all) }); n != 0 {
		t.Errorf("Negotiate allocates %v times", n)
	}
}

// TestDecide: what is never compressed, min_bytes, types, Vary.
func TestDecide(t *testing.T) {
	p, err := New(Config{MinBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	json := func(extra ...string) http.Header {
		h := http.Header{"Content-Type": {"application/json; charset=utf-8"}}
		for i := 0; i+1 < len(extra); i += 2 {
			h.Add(extra[i], extra[i+1])
		}
		return h
	}
	gz := []string{"gzip"}
	for _, c := range []struct {
		name   string
		method string
		status int
		h      http.Header
		length int64
		accept []string
		want   Decision
	}{
		{"json", "GET", 200, json(), 100_000, gz, Decision{Gzip, true}},
		{"unknown length", "GET", 200, json(), -1, gz, Decision{Gzip, true}},
		{"text/html", "GET", 200, http.Header{"Content-Type": {"text/html"}}, 5000, gz, Decision{Gzip, true}},
		{"TEXT/Plain", "GET", 404, http.Header{"Content-Type": {"TEXT/Plain"}}, 5000, gz, Decision{Gzip, true}},
		{"no accept-encoding", "GET", 200, json(), 100_000, nil, Decision{None, true}},
		{"small", "GET", 200, json(), 1023, gz, Decision{None, true}},
		{"small, identity refused", "GET", 200, json(), 10, []string{"gzip, identity;q=0"}, Decision{Gzip, true}},
		{"image", "GET", 200, http.Header{"Content-Type": {"image/png"}}, 100_000, gz, Decision{}},
		{"no type", "GET", 200, http.Header{}, 100_000, gz, Decision{}},
		{"HEAD", "HEAD", 200, json(), 100_000, gz, Decision{}},
		{"204", "GET", 204, json(), 0, gz, Decision{}},
		{"206", "GET", 206, json("Content-Range", "bytes 0-99/1000"), 100, gz, Decision{}},
		{"content-range on 200", "GET", 200, json("Content-Range", "bytes 0-99/1000"), 100_000, gz, Decision{}},
		{"304", "GET", 304, json(), -1, gz, Decision{}},
		{"encoded", "GET", 200, json("Content-Encoding", "gzip"), 100_000, gz, Decision{}},
		{"identity", "GET", 200, json("Content-Encoding", "identity"), 100_000, gz, Decision{Gzip, true}},
		{"no-transform", "GET", 200, json("Cache-Control", "public, No-Transform"), 100_000, gz, Decision{}},
		{"no-transform-ish", "GET", 200, json("Cache-Control", "no-transformx"), 100_000, gz, Decision{Gzip, true}},
		{"SSE", "GET", 200, http.Header{"Content-Type": {"text/event-stream"}}, -1, gz, Decision{}},
		{"gRPC", "POST", 200, http.Header{"Content-Type": {"application/grpc+proto"}}, -1, gz, Decision{}},
		{"digest", "GET", 200, json("Content-Digest", "sha-256=:x:"), 100_000, gz, Decision{}},
	} {
		if got := p.Decide(c.method, c.accept, c.status, c.h, c.length); got != c.want {
			t.Errorf("%s: Decide = %+v; want %+v", c.name, got, c.want)
		}
	}
	var nilPolicy *Policy
	if d := nilPolicy.Decide("GET", gz, 200, json(), 100_000); d != (Decision{}) {
		t.Errorf("nil policy: %+v", d)
	}
}

func TestNewErrors(t *testing.T) {
	for _, c := range []Config{
		{Types: []string{"json"}}, {Types: []string{"*/*"}}, {Types: []string{"text/html; charset=utf-8"}},
		{Algorithms: []string{"deflate"}}, {Algorithms: []string{"gzip", "gzip"}}, {MinBytes: -1},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v): no error", c)
		}
	}
}

// TestApply: Vary merged, Content-Length and Accept-Ranges gone, a strong
// ETag weakened, a weak one kept.
func TestApply(t *testing.T) {
	h := http.Header{"Content-Length": {"100"}, "Accept-Ranges": {"bytes"}, "Etag": {`"abc"`}, "Vary": {"Origin"}}
	Apply(h, Decision{Brotli, true})
	want := http.Header{"Content-Encoding": {"br"}, "Etag": {`W/"abc"`}, "Vary": {"Origin", "Accept-Encoding"}}
	if fmt.Sprint(h) != fmt.Sprint(want) {
		t.Errorf("Apply: %v; want %v", h, want)
	}
	h = http.Header{"Etag": {`W/"abc"`}, "Vary": {"accept-encoding"}}
	Apply(h, Decision{Gzip, true})
	if h.Get("Etag") != `W/"abc"` || len(h["Vary"]) != 1 {
		t.Errorf("Apply: %v", h)
	}
	h = http.Header{"Content-Length": {"100"}}
	Apply(h, Decision{None, true})
	if h.Get("Content-Length") != "100" || h.Get("Vary") != "Accept-Encoding" || h.Get("Content-Encoding") != "" {
		t.Errorf("Apply without a coding: %v", h)
	}
}

// decode decodes body of coding c.
func decode(t testing.TB, c Coding, body []byte) []byte {
	t.Helper()
	var r io.Reader
	switch c {
	case Gzip:
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	case Brotli:
		r = brotli.NewReader(bytes.NewReader(body))
	case Zstd:
		zr, err := zstd.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%v: %v", c, err)
	}
	return out
}

// TestWriterRoundTrip: each coding's stream decodes to what was written,
// a Flush makes what was written so far decodable (streaming), and a
// pooled writer starts a fresh stream.
func TestWriterRoundTrip(t *testing.T) {
	body := jsonBody(100 << 10)
	for _, c := range all {
		for round := range 2 {
			rec := httptest.NewRecorder()
			w := NewWriter(rec, c)
			w.WriteHeader(200)
			if _, err := w.Write(body[:1000]); err != nil {
				t.Fatal(err)
			}
			w.Flush()
			if !rec.Flushed || rec.Body.Len() == 0 {
				t.Fatalf("%v: Flush sent nothing", c)
			}
			if c != Zstd { // a flushed zstd stream has no end yet: its reader waits for more
				part := partialDecode(t, c, rec.Body.Bytes())
				if !bytes.Equal(part, body[:1000]) {
					t.Fatalf("%v: after Flush, %d bytes decode", c, len(part))
				}
			}
			w.Write(body[1000:])
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if w.Written() != int64(rec.Body.Len()) {
				t.Errorf("%v: Written %d, body %d", c, w.Written(), rec.Body.Len())
			}
			w.Release()
			if got := decode(t, c, rec.Body.Bytes()); !bytes.Equal(got, body) {
				t.Fatalf("%v round %d: decoded %d bytes, want %d", c, round, len(got), len(body))
			}
			if rec.Body.Len() > len(body)/3 {
				t.Errorf("%v: %d bytes for %d of JSON", c, rec.Body.Len(), len(body))
			}
		}
	}
}

// partialDecode reads what a stream without its end decodes to.
func partialDecode(t *testing.T, c Coding, b []byte) []byte {
	var r io.Reader
	switch c {
	case Gzip:
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	case Brotli:
		r = brotli.NewReader(bytes.NewReader(b))
	}
	out, _ := io.ReadAll(r) // io.ErrUnexpectedEOF: the stream goes on
	return out
}

// jsonBody is about n bytes of API-like JSON.
func jsonBody(n int) []byte {
	type item struct {
		ID     int      `json:"id"`
		Name   string   `json:"name"`
		Email  string   `json:"email"`
		Active bool     `json:"active"`
		Tags   []string `json:"tags"`
		Score  float64  `json:"score"`
	}
	var items []item
	var b []byte
	for i := 0; len(b) < n; i++ {
		items = append(items, item{i, fmt.Sprintf("user %d", i), fmt.Sprintf("user%d@example.com", i*7919%10007),
			i%3 != 0, []string{"alpha", "beta", strings.Repeat("g", i%5)}, float64(i%97) / 7})
		if i%64 == 0 {
			b, _ = json.Marshal(items)
		}
	}
	b, _ = json.Marshal(items)
	return b[:n]
}

// FuzzNegotiate: any Accept-Encoding value, never a panic nor a coding
// the field refuses or the route does not offer.
func FuzzNegotiate(f *testing.F) {
	for _, s := range []string{"gzip", "br;q=1, gzip;q=0.5", "identity;q=0", "*;q=0", "x-gzip;q=0.001", "zstd;q=1.000, *", ";q=", "gzip;q=0.1234", ",,,;"} {
		f.Add(s, uint8(7))
	}
	f.Fuzz(func(t *testing.T, accept string, mask uint8) {
		var offered []Coding
		for _, c := range all {
			if mask&(1<<c) != 0 {
				offered = append(offered, c)
			}
		}
		c, _ := Negotiate([]string{accept}, offered)
		if c == None {
			return
		}
		found := false
		for _, o := range offered {
			found = found || o == c
		}
		if !found {
			t.Fatalf("Negotiate(%q, %v) = %v, not offered", accept, offered, c)
		}
		a := parseAccept([]string{accept})
		q := a.q[c]
		if q == qUnset {
			q = a.star
		}
		if q <= 0 {
			t.Fatalf("Negotiate(%q) = %v, which it weighs %d", accept, c, q)
		}
	})
}
