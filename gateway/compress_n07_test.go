package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/impulse-agent/impulse-agent/gateway/compress"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// n07JSON is the case's 100 KB JSON response.
var n07JSON = func() []byte {
	type item struct {
		ID    int      `json:"id"`
		Name  string   `json:"name"`
		Email string   `json:"email"`
		Tags  []string `json:"tags"`
	}
	var items []item
	for i := 0; i < 1500; i++ {
		items = append(items, item{i, fmt.Sprintf("user %d", i), fmt.Sprintf("u%d@example.com", i*7919%10007), []string{"a", "b"}})
	}
	b, _ := json.Marshal(items)
	return b[:100_000]
}()

// n07Backend serves the case's responses; an SSE stream sends its first
// event at once and its second when release is closed.
func n07Backend(release chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		switch r.URL.Path {
		case "/json", "/notransform":
			h.Set("Content-Type", "application/json")
			h.Set("ETag", `"v1"`)
			if r.URL.Path == "/notransform" {
				h.Set("Cache-Control", "no-transform")
			}
			h.Set("Content-Length", fmt.Sprint(len(n07JSON)))
			w.Write(n07JSON)
		case "/small":
			h.Set("Content-Type", "application/json")
			w.Write(n07JSON[:100])
		case "/gzipped":
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write(n07JSON)
			zw.Close()
			h.Set("Content-Type", "application/json")
			h.Set("Content-Encoding", "gzip")
			w.Write(buf.Bytes())
		case "/range":
			h.Set("Content-Type", "application/json")
			http.ServeContent(w, r, "data.json", time.Unix(1e9, 0), bytes.NewReader(n07JSON))
		case "/sse":
			h.Set("Content-Type", "text/event-stream")
			h.Set("Cache-Control", "no-cache")
			io.WriteString(w, "data: "+strings.Repeat("x", 2000)+"\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, "data: second\n\n")
		case "/grpc":
			io.Copy(io.Discard, r.Body)
			h.Set("Content-Type", "application/grpc")
			h.Set("Trailer", "Grpc-Status")
			w.Write(append([]byte{0, 0, 0, 7, 208}, n07JSON[:2000]...))
			h.Set("Grpc-Status", "0")
		default:
			http.NotFound(w, r)
		}
	}
}

// n07Decode decodes body as Content-Encoding ce says.
func n07Decode(t *testing.T, ce string, body []byte) []byte {
	t.Helper()
	var r io.Reader = bytes.NewReader(body)
	switch ce {
	case "":
		return body
	case "gzip":
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	case "br":
		r = brotli.NewReader(r)
	case "zstd":
		zr, err := zstd.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	default:
		t.Fatalf("Content-Encoding %q", ce)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decoding %s: %v", ce, err)
	}
	return out
}

// TestN07CompressionNeverBreaksAResponse: case N07 over every ingress.
// Only the JSON is compressed, with the best coding the client accepts,
// its ETag weakened, its Content-Length gone and Vary: Accept-Encoding
// set; an encoded response, a range, SSE, gRPC and no-transform pass as
// sent; the first SSE event arrives before the backend sends the second.
func TestN07CompressionNeverBreaksAResponse(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		release := make(chan struct{})
		be := testbackend.NewH1(t, n07Backend(release))
		uc := staticUpstream("web", "/", be)
		uc.Routes[0].Compress = &compress.Config{MinBytes: 1024}
		h := newHarnessOver(t, proto, uc)
		if ri := h.gw.Routes(); len(ri) != 1 || !slices.Equal(ri[0].Compress, []string{"zstd", "br", "gzip"}) || ri[0].CORS {
			t.Errorf("/v1/routes: %+v", ri)
		}

		get := func(path string, hdr ...string) (*http.Response, []byte) {
			t.Helper()
			req, _ := http.NewRequest("GET", h.base+path, nil)
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("GET %s: body: %v", path, err)
			}
			return resp, body
		}

		for _, c := range []struct{ accept, want string }{
			{"br;q=1, gzip;q=0.5", "br"},
			{"gzip, deflate, br, zstd", "zstd"},
			{"gzip", "gzip"},
			{"gzip, identity;q=0", "gzip"},
			{"identity;q=0", ""}, // nothing the gateway has is acceptable: as sent
			{"gzip;q=0, br;q=0", ""},
		} {
			resp, body := get("/json", "Accept-Encoding", c.accept)
			ce := resp.Header.Get("Content-Encoding")
			if resp.StatusCode != 200 || ce != c.want {
				t.Fatalf("Accept-Encoding %q: %d, Content-Encoding %q; want %q", c.accept, resp.StatusCode, ce, c.want)
			}
			if got := n07Decode(t, ce, body); !bytes.Equal(got, n07JSON) {
				t.Fatalf("Accept-Encoding %q: %d bytes decoded, want the %d sent", c.accept, len(got), len(n07JSON))
			}
			if resp.Header.Get("Vary") != "Accept-Encoding" {
				t.Errorf("Accept-Encoding %q: Vary %q", c.accept, resp.Header.Values("Vary"))
			}
			wantTag, wantLen := `"v1"`, int64(len(n07JSON))
			if ce != "" {
				wantTag, wantLen = `W/"v1"`, -1
				if len(body) > len(n07JSON)/4 {
					t.Errorf("%s: %d bytes for %d of JSON", ce, len(body), len(n07JSON))
				}
			}
			if et := resp.Header.Get("Etag"); et != wantTag {
				t.Errorf("Accept-Encoding %q: ETag %q; want %q", c.accept, et, wantTag)
			}
			if resp.ContentLength != wantLen || (wantLen < 0 && resp.Header.Get("Content-Length") != "") {
				t.Errorf("Accept-Encoding %q: Content-Length %d %q", c.accept, resp.ContentLength, resp.Header.Get("Content-Length"))
			}
		}

		ae := "Accept-Encoding"
		// Passed unchanged: already encoded, no-transform, small, a range.
		if resp, body := get("/gzipped", ae, "br, gzip"); resp.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(n07Decode(t, "gzip", body), n07JSON) {
			t.Errorf("already gzipped: %q", resp.Header.Get("Content-Encoding"))
		}
		if resp, body := get("/notransform", ae, "br, gzip"); resp.Header.Get("Content-Encoding") != "" || !bytes.Equal(body, n07JSON) || resp.Header.Get("Etag") != `"v1"` {
			t.Errorf("no-transform: %q, %d bytes", resp.Header.Get("Content-Encoding"), len(body))
		}
		if resp, body := get("/small", ae, "br, gzip"); resp.Header.Get("Content-Encoding") != "" || !bytes.Equal(body, n07JSON[:100]) {
			t.Errorf("small: %q", resp.Header.Get("Content-Encoding"))
		}
		resp, body := get("/range", ae, "br, gzip", "Range", "bytes=100-199")
		if resp.StatusCode != 206 || resp.Header.Get("Content-Encoding") != "" || !bytes.Equal(body, n07JSON[100:200]) {
			t.Errorf("range: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Encoding"), body)
		}

		// gRPC: the response is the backend's, trailers and all.
		req, _ := http.NewRequest("POST", h.base+"/grpc", bytes.NewReader([]byte{0, 0, 0, 0, 0}))
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		req.Header.Set(ae, "gzip, br")
		if proto != ProtocolH1 {
			gresp, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			gbody, _ := io.ReadAll(gresp.Body)
			gresp.Body.Close()
			if gresp.Header.Get("Content-Encoding") != "" || len(gbody) != 2005 || gresp.Trailer.Get("Grpc-Status") != "0" {
				t.Errorf("gRPC: %q, %d bytes, trailers %v", gresp.Header.Get("Content-Encoding"), len(gbody), gresp.Trailer)
			}
		}

		// SSE: passed as sent, and the first event is not held back.
		req, _ = http.NewRequest("GET", h.base+"/sse", nil)
		req.Header.Set(ae, "gzip, br, zstd")
		sresp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer sresp.Body.Close()
		if sresp.Header.Get("Content-Encoding") != "" || sresp.Header.Get("Vary") != "" {
			t.Errorf("SSE: Content-Encoding %q, Vary %q", sresp.Header.Get("Content-Encoding"), sresp.Header.Get("Vary"))
		}
		first := make(chan string, 1)
		go func() {
			line, _ := bufio.NewReader(sresp.Body).ReadString('\n')
			first <- line
		}()
		select {
		case line := <-first:
			if !strings.HasPrefix(line, "data: xxx") {
				t.Errorf("SSE: first line %q", line)
			}
		case <-time.After(5 * time.Second):
			t.Error("SSE: the first event did not arrive before the second was sent")
		}
		close(release)
	})
}

// TestN07CurlCompressed: curl --compressed (its zlib, brotli and zstd)
// decodes what the gateway sends over HTTP/1.1 and HTTP/2.
func TestN07CurlCompressed(t *testing.T) {
	curl := tool(t, "curl", "curl")
	be := testbackend.NewH1(t, n07Backend(make(chan struct{})))
	uc := staticUpstream("web", "/", be)
	uc.Routes[0].Compress = &compress.Config{}
	h := newHarnessOver(t, ProtocolH2, uc)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, h.cert.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--http1.1", "--http2"} {
		for _, accept := range []string{"", "gzip", "br", "zstd"} {
			args := []string{"-sS", flag, "--compressed", "--cacert", ca, "-D", "-"}
			if accept != "" {
				args = append(args, "-H", "Accept-Encoding: "+accept)
			}
			out := run(t, curl, append(args, h.base+"/json")...)
			head, body, _ := strings.Cut(out, "\r\n\r\n")
			want := accept
			if want == "" {
				want = "zstd" // curl offers every coding it has: the route's first
			}
			if !strings.Contains(strings.ToLower(head), "content-encoding: "+want) || body != string(n07JSON) {
				t.Errorf("curl %s %q: %d bytes decoded\n%s", flag, accept, len(body), head)
			}
		}
	}
}

// TestCompressStreamsFlushes: a streamed JSON response (no length, the
// backend flushing between parts) is encoded without waiting for its end:
// the client decodes the first part while the backend holds the second,
// over every ingress and with each coding.
func TestCompressStreamsFlushes(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		release := make(chan struct{})
		part := `{"part":1,"pad":"` + strings.Repeat("p", 4000) + `"}` + "\n"
		be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, part)
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, `{"part":2}`+"\n")
		}))
		uc := staticUpstream("web", "/", be)
		uc.Routes[0].Compress = &compress.Config{}
		h := newHarnessOver(t, proto, uc)
		for _, coding := range []string{"gzip", "br", "zstd"} {
			req, _ := http.NewRequest("GET", h.base+"/stream", nil)
			req.Header.Set("Accept-Encoding", coding)
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if ce := resp.Header.Get("Content-Encoding"); ce != coding {
				t.Fatalf("Content-Encoding %q; want %q", ce, coding)
			}
			var dec io.Reader
			switch coding {
			case "gzip":
				zr, err := gzip.NewReader(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				dec = zr
			case "br":
				dec = brotli.NewReader(resp.Body)
			case "zstd":
				zr, err := zstd.NewReader(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				defer zr.Close()
				dec = zr
			}
			br := bufio.NewReader(dec)
			first := make(chan string, 1)
			go func() {
				line, _ := br.ReadString('\n')
				first <- line
			}()
			select {
			case line := <-first:
				if line != part {
					t.Errorf("%s: first part %.40q", coding, line)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: the first part did not arrive while the backend held the second", coding)
			}
			release <- struct{}{}
			rest, err := io.ReadAll(br)
			if err != nil || string(rest) != `{"part":2}`+"\n" {
				t.Errorf("%s: rest %q, %v", coding, rest, err)
			}
			resp.Body.Close()
		}
	})
}
