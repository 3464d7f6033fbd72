package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// Benchmark payload sizes.
const (
	smallSize = 64
	oneMiB    = 1 << 20
)

var (
	smallBody  = patternBlock[:smallSize]
	oneMiBBody = func() []byte {
		b := make([]byte, 0, oneMiB)
		for len(b) < oneMiB {
			b = append(b, patternBlock...)
		}
		return b
	}()
	uploadBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}
)

// payloadHandler answers the benchmark paths, the same in the test backend
// and in the bare HTTP/3 server:
//
//	GET  /small        64 bytes
//	GET  /1m           1 MiB
//	GET  /big?size=N   N bytes, streamed in 64 KiB writes
//	POST /upload       reads and discards the body; answers its length
//
// Every response has a Content-Length; anything else is 404.
func payloadHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Content-Type"] = []string{"application/octet-stream"}
		switch r.URL.Path {
		case "/small":
			h["Content-Length"] = []string{strconv.Itoa(smallSize)}
			_, _ = w.Write(smallBody)
		case "/1m":
			h["Content-Length"] = []string{strconv.Itoa(oneMiB)}
			_, _ = w.Write(oneMiBBody)
		case "/big":
			size, err := strconv.ParseInt(r.URL.Query().Get("size"), 10, 64)
			if err != nil || size < 0 {
				http.Error(w, "size: want a byte count", http.StatusBadRequest)
				return
			}
			h["Content-Length"] = []string{strconv.FormatInt(size, 10)}
			for left := size; left > 0; {
				n := min(left, int64(len(patternBlock)))
				if _, err := w.Write(patternBlock[:n]); err != nil {
					return
				}
				left -= n
			}
		case "/upload":
			bp := uploadBufs.Get().(*[]byte)
			var n int64
			var err error
			for {
				var k int
				k, err = r.Body.Read(*bp)
				n += int64(k)
				if err != nil {
					break
				}
			}
			uploadBufs.Put(bp)
			if err != io.EOF {
				http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
				return
			}
			out := strconv.AppendInt(nil, n, 10)
			h["Content-Length"] = []string{strconv.Itoa(len(out))}
			_, _ = w.Write(out)
		default:
			http.NotFound(w, r)
		}
	})
}

// loadCert reads certFile/keyFile, or generates a self-signed certificate
// for 127.0.0.1 and localhost when both are empty.
func loadCert(certFile, keyFile string) (tls.Certificate, error) {
	if certFile == "" && keyFile == "" {
		c, err := selfsigned.New("127.0.0.1", "localhost")
		if err != nil {
			return tls.Certificate{}, err
		}
		fmt.Fprintln(os.Stderr, "bench: no -cert/-key: serving a generated self-signed certificate (clients need -insecure)")
		return c.TLS, nil
	}
	return tls.LoadX509KeyPair(certFile, keyFile)
}

// announce prints the bound addresses as one JSON line on stdout; the
// harness waits for it.
func announce(addrs map[string]string) {
	b, _ := json.Marshal(addrs)
	fmt.Println(string(b))
}

// runBackend is the `backend` subcommand: the test backend, cleartext
// HTTP/1.1 on -h1 and HTTP/2 over TLS on -h2, until SIGINT/SIGTERM.
func runBackend(args []string) error {
	fs := flag.NewFlagSet("backend", flag.ContinueOnError)
	h1Addr := fs.String("h1", "127.0.0.1:0", "cleartext HTTP/1.1 address (\"\" = off)")
	h2Addr := fs.String("h2", "127.0.0.1:0", "HTTP/2-over-TLS address (\"\" = off)")
	certFile := fs.String("cert", "", "TLS certificate PEM for -h2 (empty: self-signed)")
	keyFile := fs.String("key", "", "TLS key PEM for -h2")
	if err := fs.Parse(args); err != nil {
		return err
	}
	addrs := map[string]string{}
	errc := make(chan error, 2)
	var servers []*http.Server
	if *h1Addr != "" {
		ln, err := net.Listen("tcp", *h1Addr)
		if err != nil {
			return err
		}
		p := new(http.Protocols)
		p.SetHTTP1(true)
		srv := &http.Server{Handler: payloadHandler(), Protocols: p, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		addrs["h1"] = ln.Addr().String()
		go func() { errc <- srv.Serve(ln) }()
	}
	if *h2Addr != "" {
		cert, err := loadCert(*certFile, *keyFile)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *h2Addr)
		if err != nil {
			return err
		}
		p := new(http.Protocols)
		p.SetHTTP2(true)
		p.SetHTTP1(true)
		srv := &http.Server{
			Handler:           payloadHandler(),
			Protocols:         p,
			ReadHeaderTimeout: 10 * time.Second,
			TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		}
		servers = append(servers, srv)
		addrs["h2"] = ln.Addr().String()
		go func() { errc <- srv.ServeTLS(ln, "", "") }()
	}
	announce(addrs)
	select {
	case <-signalled():
	case err := <-errc:
		return err
	}
	for _, s := range servers {
		_ = s.Close()
	}
	return nil
}

// quicServerConfig is the QUIC configuration of the agent's listeners
// (gateway/listener.go), so the bare server is the same QUIC stack under
// the same limits.
func quicServerConfig() *quic.Config {
	return &quic.Config{
		MaxIdleTimeout:        30 * time.Second,
		MaxIncomingStreams:    256,
		MaxIncomingUniStreams: 16,
	}
}

// runBare is the `bare` subcommand: a quic-go HTTP/3 server that answers
// the benchmark paths itself, the ceiling a proxy on the same stack can
// approach.
func runBare(args []string) error {
	fs := flag.NewFlagSet("bare", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "UDP address")
	certFile := fs.String("cert", "", "TLS certificate PEM (empty: self-signed)")
	keyFile := fs.String("key", "", "TLS key PEM")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cert, err := loadCert(*certFile, *keyFile)
	if err != nil {
		return err
	}
	conn, err := net.ListenPacket("udp", *addr)
	if err != nil {
		return err
	}
	srv := &http3.Server{
		Handler:    payloadHandler(),
		TLSConfig:  http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}),
		QUICConfig: quicServerConfig(),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(conn) }()
	announce(map[string]string{"h3": conn.LocalAddr().String()})
	select {
	case <-signalled():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	_ = srv.Close()
	return conn.Close()
}
