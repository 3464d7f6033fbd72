package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http/httpguts"
)

// probeUserAgent is sent unless the operator supplies a User-Agent with -H.
const probeUserAgent = "impulse-agent-probe"

// headerList collects repeatable -H 'Name: value' flags.
type headerList []string

func (h *headerList) String() string     { return strings.Join(*h, ", ") }
func (h *headerList) Set(v string) error { *h = append(*h, v); return nil }

// probeOptions is the parsed command line of `impulse-agent probe`.
type probeOptions struct {
	insecure bool
	caCert   string
	method   string
	headers  http.Header
	host     string // from -H 'Host: x'; becomes the :authority
	data     string // raw -d argument ("" when hasData is false)
	hasData  bool
	verbose  bool
	count    int
	timeout  time.Duration
	url      *url.URL
}

// runProbe implements `impulse-agent probe`: an HTTP/3 client for operators.
// It sends the request COUNT times over one http3.Transport (so one QUIC
// connection), writes bodies to stdout and diagnostics to stderr, and returns
// the process exit code: 0 when every answer was 2xx/3xx, 1 on any other
// status or a connection/stream error, 2 on a usage error.
func runProbe(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	opts, code := parseProbeFlags(args, stderr)
	if opts == nil {
		return code
	}
	tlsConf := &tls.Config{InsecureSkipVerify: opts.insecure} //nolint:gosec // operator opt-in via -insecure
	if opts.caCert != "" {
		pool, err := loadCAPool(opts.caCert)
		if err != nil {
			fmt.Fprintf(stderr, "probe: %v\n", err)
			return 2
		}
		tlsConf.RootCAs = pool
	}
	tr := &http3.Transport{TLSClientConfig: tlsConf, DisableCompression: true}
	defer tr.Close()

	tally := map[int]int{}
	var errs int
	ok := true
	for range opts.count {
		status, err := probeOnce(tr, opts, stdin, stdout, stderr, opts.count == 1 || opts.verbose)
		if err != nil {
			errs++
			fmt.Fprintf(stderr, "probe: %v\n", err)
			continue
		}
		tally[status]++
		ok = ok && status >= 200 && status < 400
	}
	if opts.count > 1 {
		for _, c := range slices.Sorted(maps.Keys(tally)) {
			fmt.Fprintf(stderr, "%d: %d\n", c, tally[c])
		}
		fmt.Fprintf(stderr, "errors: %d\n", errs)
	}
	if !ok || errs > 0 {
		return 1
	}
	return 0
}

// parseProbeFlags parses and validates args. On failure (or -h) it returns a
// nil options and the exit code to use.
func parseProbeFlags(args []string, stderr io.Writer) (*probeOptions, int) {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o       = probeOptions{headers: http.Header{}}
		hdrs    headerList
		timeout = fs.Duration("timeout", 10*time.Second, "per-request `duration` limit, including the body (0 = none)")
	)
	fs.BoolVar(&o.insecure, "insecure", false, "skip TLS certificate verification")
	fs.StringVar(&o.caCert, "cacert", "", "PEM `FILE` of CA certificates trusted in addition to the system roots")
	fs.StringVar(&o.method, "X", "", "request `METHOD` (default GET, or POST with -d)")
	fs.Var(&hdrs, "H", "add a request header `'Name: value'` (repeatable; 'Host: x' sets the :authority)")
	fs.Func("d", "request body: `DATA`, @file or @- for stdin (streamed; sent as is, no Content-Type added)",
		func(v string) error { o.data, o.hasData = v, true; return nil })
	fs.BoolVar(&o.verbose, "v", false, "print request line, status, response headers and trailers to stderr")
	fs.IntVar(&o.count, "n", 1, "send the request `COUNT` times on one connection and print a status tally")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: impulse-agent probe [flags] https://host[:port]/path")
		fmt.Fprintln(stderr, "HTTP/3 client: prints the body to stdout; exit 0 on 2xx/3xx, 1 otherwise, 2 on usage errors.")
		fs.PrintDefaults()
	}
	// Allow flags after the URL (curl habit): parse, take one positional, repeat.
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, 0
			}
			return nil, 2
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	usage := func(format string, a ...any) (*probeOptions, int) {
		fmt.Fprintf(stderr, "probe: "+format+"\n", a...)
		fs.Usage()
		return nil, 2
	}
	if len(positional) != 1 {
		return usage("exactly one URL is required, got %d arguments", len(positional))
	}
	u, err := url.Parse(positional[0])
	if err != nil {
		return usage("bad URL: %v", err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return usage("URL must be https://host[:port]/... (HTTP/3 only), got %q", positional[0])
	}
	o.url = u
	if o.count < 1 {
		return usage("-n must be at least 1")
	}
	if o.timeout = *timeout; o.timeout < 0 {
		return usage("-timeout must not be negative")
	}
	for _, h := range hdrs {
		name, value, found := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !found || name == "" || strings.ContainsAny(name, " \t") {
			return usage("bad header %q, want 'Name: value'", h)
		}
		value = strings.TrimSpace(value)
		if strings.EqualFold(name, "host") {
			if !httpguts.ValidHostHeader(value) {
				// quic-go's client would not send it and then wait for an
				// answer until -timeout (README "Not done").
				return usage("bad Host %q: not a host[:port] (RFC 3986 §3.2.2)", value)
			}
			o.host = value
			continue
		}
		o.headers.Add(name, value)
	}
	if _, set := o.headers["User-Agent"]; !set {
		o.headers.Set("User-Agent", probeUserAgent) // -H 'User-Agent:' sends none
	}
	if o.hasData {
		if o.data == "@-" && o.count > 1 {
			return usage("-d @- (stdin) cannot be replayed with -n > 1; use -d @file")
		}
		if f, ok := strings.CutPrefix(o.data, "@"); ok && f != "-" {
			fi, err := os.Stat(f)
			if err != nil {
				return usage("-d: %v", err)
			}
			if fi.IsDir() {
				return usage("-d @%s: is a directory; give a file, @- for stdin, or DATA", f)
			}
		}
	}
	if o.method == "" {
		o.method = http.MethodGet
		if o.hasData {
			o.method = http.MethodPost
		}
	}
	return &o, 0
}

// loadCAPool returns the system roots plus the PEM certificates in file.
func loadCAPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("-cacert: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("-cacert: no PEM certificates in %s", file)
	}
	return pool, nil
}

// requestBody opens the -d body for one request: a fresh reader each time,
// streamed from the file or stdin rather than buffered. Length -1 = unknown.
func requestBody(o *probeOptions, stdin io.Reader) (io.ReadCloser, int64, error) {
	switch {
	case !o.hasData, o.data == "":
		// NoBody, not an empty reader: quic-go then sends
		// content-length: 0 for POST/PUT/PATCH instead of a stream of
		// unknown length.
		return http.NoBody, 0, nil
	case o.data == "@-":
		return io.NopCloser(stdin), -1, nil
	case strings.HasPrefix(o.data, "@"):
		f, err := os.Open(o.data[1:])
		if err != nil {
			return nil, 0, err
		}
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			return f, -1, nil
		}
		return f, st.Size(), nil
	default:
		return io.NopCloser(strings.NewReader(o.data)), int64(len(o.data)), nil
	}
}

// probeOnce sends one request and returns the response status. The body is
// copied to stdout when printBody is set, else discarded; a transport error or
// a stream reset before the body's end is returned as an error.
func probeOnce(tr *http3.Transport, o *probeOptions, stdin io.Reader, stdout, stderr io.Writer, printBody bool) (int, error) {
	ctx := context.Background()
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	body, length, err := requestBody(o, stdin)
	if err != nil {
		return 0, fmt.Errorf("-d: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, o.method, o.url.String(), body)
	if err != nil {
		body.Close()
		return 0, err
	}
	req.ContentLength = length
	req.Header = o.headers.Clone()
	if o.host != "" {
		req.Host = o.host
	}
	if o.verbose {
		authority := req.Host
		if authority == "" {
			authority = req.URL.Host
		}
		fmt.Fprintf(stderr, "> %s %s HTTP/3\n> :authority: %s\n", req.Method, req.URL.RequestURI(), authority)
		printHeaders(stderr, ">", sentHeaders(req))
		fmt.Fprintln(stderr, ">")
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if o.verbose {
		fmt.Fprintf(stderr, "< HTTP/3 %d\n", resp.StatusCode)
		printHeaders(stderr, "<", resp.Header)
		fmt.Fprintln(stderr, "<")
	}
	dst := io.Discard
	if printBody {
		dst = stdout
	}
	if _, err := io.Copy(dst, resp.Body); err != nil {
		return 0, fmt.Errorf("reading body (status %d): %w", resp.StatusCode, err)
	}
	if o.verbose && len(resp.Trailer) > 0 {
		printHeaders(stderr, "<", resp.Trailer)
	}
	return resp.StatusCode, nil
}

// sentHeaders is the header section quic-go's http3 client sends for req
// (http3/request_writer.go), for -v: connection-specific fields (RFC 9114
// §4.2) and Host (sent as :authority) dropped, at most one User-Agent and
// none when it is empty, and content-length when the length is known and
// positive, or zero for POST, PUT and PATCH (as net/http does).
func sentHeaders(req *http.Request) http.Header {
	h := http.Header{}
	for k, vv := range req.Header {
		switch strings.ToLower(k) {
		case "host", "content-length", "connection", "proxy-connection", "transfer-encoding", "upgrade", "keep-alive":
			continue
		case "user-agent":
			if len(vv) == 0 || vv[0] == "" {
				continue
			}
			vv = vv[:1]
		}
		h[k] = vv
	}
	length := req.ContentLength
	if req.Body == nil || req.Body == http.NoBody {
		length = 0
	} else if length == 0 {
		length = -1
	}
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		if length == 0 {
			h.Set("Content-Length", "0")
		}
	}
	if length > 0 {
		h.Set("Content-Length", strconv.FormatInt(length, 10))
	}
	return h
}

// printHeaders writes h curl-style, lower-cased (as on the HTTP/3 wire) and
// sorted by name, one line per value.
func printHeaders(w io.Writer, prefix string, h http.Header) {
	byLower := func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) }
	for _, k := range slices.SortedFunc(maps.Keys(h), byLower) {
		for _, v := range h[k] {
			fmt.Fprintf(w, "%s %s: %s\n", prefix, strings.ToLower(k), v)
		}
	}
}
