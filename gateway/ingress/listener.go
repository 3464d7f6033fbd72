package ingress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/tunnel"
)

// Pipeline is what a listener hands its requests to: the gateway's one
// request pipeline, the same for every ingress protocol.
type Pipeline interface {
	// Serve handles r, which arrived on the listener named listener.
	// refused, when its Status is set, is the ingress adapter's own
	// answer to r (a request its protocol's framing makes malformed):
	// the pipeline gives it, with the Outcome of any request.
	Serve(listener string, w http.ResponseWriter, r *http.Request, refused answer.Answer)
}

// Deps are what the listeners of one gateway share.
type Deps struct {
	Pipeline Pipeline
	Log      hclog.Logger
	QUICLog  *slog.Logger // quic-go's own records (nil: none)
	Metrics  *observe.Metrics
	// Drains owns the ingresses a reconfiguration turned off while they
	// drain.
	Drains *Drains
}

// Listener is one configured listener: an HTTP/3 ingress on a UDP socket
// and an HTTP/1.1 + HTTP/2 ingress on a TCP socket with the same port,
// either of which may be absent. Both hand requests to the same
// Pipeline. Start makes one; Reconfigure, Shutdown and Close are called by
// one owner (the gateway, under its lock).
type Listener struct {
	name string
	addr string // as configured
	deps Deps

	protos  atomic.Pointer[protoSet]
	tls     atomic.Pointer[listenerTLS]
	altSvc  atomic.Pointer[[]string] // the Alt-Svc value for TCP responses; nil when h3 is off
	early   atomic.Bool              // ListenerConfig.EarlyData, read by each new QUIC connection
	mesh    atomic.Bool              // ListenerConfig.Mesh is set: HTTP/2 by prior knowledge without ALPN (prior.go)
	tickets tls.Config               // only its session ticket keys are used: the QUIC side's, kept across reloads
	active  atomic.Int64             // requests being handled, over every protocol

	client atomic.Pointer[clientConf] // PROXY protocol, trusted forwarders, IP rules (client.go)

	quic *quicIngress // nil when h3 is off
	tcp  *tcpIngress  // nil when h1 and h2 are off

	conns   *connLimiter // max_connections, over both ingresses
	tunnels tunnel.Set   // open tunnels, over both ingresses
}

// protoSet is the set of protocols a listener serves.
type protoSet struct{ h1, h2, h3 bool }

func (p protoSet) tcp() bool { return p.h1 || p.h2 }

func (p protoSet) any() bool { return p.h1 || p.h2 || p.h3 }

// has reports whether p holds the protocol named name (ProtocolH1, ...).
func (p protoSet) has(name string) bool {
	return name == ProtocolH1 && p.h1 || name == ProtocolH2 && p.h2 || name == ProtocolH3 && p.h3
}

// parseProtocols turns ListenerConfig.Protocols into a set. Errors: an
// unknown name.
func parseProtocols(names []string) (protoSet, error) {
	if len(names) == 0 {
		return protoSet{true, true, true}, nil
	}
	var p protoSet
	for _, n := range names {
		switch n {
		case ProtocolH1:
			p.h1 = true
		case ProtocolH2:
			p.h2 = true
		case ProtocolH3:
			p.h3 = true
		default:
			return p, fmt.Errorf("unknown protocol %q (want h1, h2 or h3)", n)
		}
	}
	return p, nil
}

// listenerTLS holds the configurations derived from ListenerConfig.TLS for
// each ingress, built once per Apply rather than per handshake.
type listenerTLS struct {
	quic *tls.Config // ALPN h3
	tcp  *tls.Config // ALPN h2 and/or http/1.1, TLS 1.2+
}

// ListenerError is a listener whose UDP or TCP socket could not be bound
// (address in use, cannot assign the address, permission denied): Name is
// its ListenerConfig.Name, Err the *net.OpError.
type ListenerError struct {
	Name string
	Err  error
}

func (e *ListenerError) Error() string { return fmt.Sprintf("gateway: listener %q: %v", e.Name, e.Err) }

// Unwrap returns the bind error.
func (e *ListenerError) Unwrap() error { return e.Err }

// defaultAltSvcMaxAge is the Alt-Svc ma default (Caddy and Traefik use 24h).
const defaultAltSvcMaxAge = 24 * time.Hour

// configure stores what may change without rebinding: protocols, TLS, early
// data and the Alt-Svc value. port is the bound port.
func (l *Listener) configure(lc Config, p protoSet, port int) {
	l.protos.Store(&p)
	base := lc.TLS
	if lc.Mesh != nil {
		base = lc.Mesh.ServerTLS()
	}
	l.mesh.Store(lc.Mesh != nil)
	lt := deriveTLS(base, p)
	// quic-go's http3 seals tickets with the keys of the configuration a
	// handshake gets, which is new after each reload: borrow stable
	// (auto-rotating) ones, so tickets, and so 0-RTT, survive a reload as
	// they do on TCP (where crypto/tls uses the outer configuration's).
	lt.quic.WrapSession, lt.quic.UnwrapSession = l.tickets.EncryptTicket, l.tickets.DecryptTicket
	l.tls.Store(lt)
	// A mesh listener never accepts 0-RTT: early data is handled before
	// the handshake has verified the peer's certificate.
	l.early.Store(lc.EarlyData && lc.Mesh == nil)
	l.client.Store(&clientConf{proxy: lc.ProxyProtocol, forwarded: lc.ForwardedTrusted, rules: lc.IPRules})
	if !p.h3 {
		l.altSvc.Store(nil)
		return
	}
	if lc.AltSvcPort > 0 {
		port = lc.AltSvcPort
	}
	age := lc.AltSvcMaxAge
	if age <= 0 {
		age = defaultAltSvcMaxAge
	}
	v := []string{`h3=":` + strconv.Itoa(port) + `"; ma=` + strconv.FormatInt(int64(age/time.Second), 10)}
	l.altSvc.Store(&v)
}

// tls12CipherSuites are the TLS 1.2 suites the TCP listener offers: ECDHE
// with an AEAD only, Mozilla's "intermediate" profile and RFC 9113 §9.2.2's
// floor for HTTP/2. Go's defaults add ECDHE with CBC-SHA, which a scanner
// flags as weak. TLS 1.3 suites are not configurable and all AEAD.
var tls12CipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// deriveTLS builds the per-ingress configurations from the configured one.
// Client authentication, certificates and GetCertificate carry over to
// both, so QUIC and TCP admit exactly the same clients.
func deriveTLS(base *tls.Config, p protoSet) *listenerTLS {
	q := base.Clone()
	q.NextProtos = []string{"h3"}
	q.MinVersion = tls.VersionTLS13
	t := base.Clone()
	t.NextProtos = nil
	if p.h2 {
		t.NextProtos = append(t.NextProtos, "h2")
	}
	if p.h1 {
		t.NextProtos = append(t.NextProtos, "http/1.1")
	}
	t.MinVersion = tls.VersionTLS12
	if t.CipherSuites == nil {
		t.CipherSuites = tls12CipherSuites
	}
	if base.MinVersion > tls.VersionTLS12 && base.MinVersion != tls.VersionTLS13 {
		t.MinVersion = base.MinVersion
	}
	return &listenerTLS{quic: q, tcp: t}
}

// Check reports what makes lc unusable: no TLS nor Mesh, an unknown protocol, an
// unknown ProxyProtocol.UDP format, both TLS and Mesh.
func (lc Config) Check() error {
	switch {
	case lc.TLS == nil && lc.Mesh == nil:
		return fmt.Errorf("gateway: listener %q: no TLS configuration", lc.Name)
	case lc.TLS != nil && lc.Mesh != nil:
		return fmt.Errorf("gateway: listener %q: a mesh listener takes its TLS from the mesh, not from a TLS configuration", lc.Name)
	}
	if _, err := parseProtocols(lc.Protocols); err != nil {
		return fmt.Errorf("gateway: listener %q: %w", lc.Name, err)
	}
	if pp := lc.ProxyProtocol; pp != nil && !pp.UDP.Valid() {
		return fmt.Errorf("gateway: listener %q: unknown proxy_protocol udp format %q (want \"\", %q or %q)", lc.Name, pp.UDP, UDPSPP, UDPProxyV2)
	}
	return nil
}

// Start binds lc's sockets synchronously (so bind errors surface here,
// as *ListenerError) and serves them in the background. Errors: those of
// Check, a socket that cannot be bound, quic-go refusing the
// configuration.
func Start(lc Config, deps Deps) (*Listener, error) {
	if err := lc.Check(); err != nil {
		return nil, err
	}
	p, _ := parseProtocols(lc.Protocols)
	lim := lc.Limits.Resolved()
	l := &Listener{name: lc.Name, addr: lc.Address, deps: deps, conns: newConnLimiter(lim.MaxConnections)}
	udp, tcp, err := bindPair(lc.Address, p.h3, p.tcp())
	if err != nil {
		return nil, &ListenerError{Name: lc.Name, Err: err}
	}
	l.configure(lc, p, boundPort(udp, tcp))
	if udp != nil {
		if l.quic, err = l.startQUIC(udp, lim); err != nil {
			udp.Close()
			if tcp != nil {
				tcp.Close()
			}
			return nil, fmt.Errorf("gateway: listener %q: %w", lc.Name, err)
		}
	}
	if tcp != nil {
		l.tcp = l.startTCP(tcp, lim)
	}
	deps.Log.Info("listener started", "listener", lc.Name, "protocols", p.String(), "address", l.Addr().String())
	return l, nil
}

// Reconfigure applies lc to a running listener with the same address:
// sockets are bound for protocols turned on and drained (bounded by ctx)
// for protocols turned off; connections that stay keep running.
func (l *Listener) Reconfigure(ctx context.Context, lc Config) error {
	if err := lc.Check(); err != nil {
		return err
	}
	p, _ := parseProtocols(lc.Protocols)
	host, _, _ := net.SplitHostPort(l.addr)
	port := boundPort(l.Sockets())
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	var udp net.PacketConn
	var tcp net.Listener
	var err error
	if p.h3 && l.quic == nil {
		if udp, err = net.ListenPacket("udp", addr); err != nil {
			return &ListenerError{Name: l.name, Err: err}
		}
	}
	if p.tcp() && l.tcp == nil {
		if tcp, err = net.Listen("tcp", addr); err != nil {
			if udp != nil {
				udp.Close()
			}
			return &ListenerError{Name: l.name, Err: err}
		}
	}
	lim := lc.Limits.Resolved()
	old := *l.protos.Load()
	l.configure(lc, p, port)
	l.conns.setMax(lim.MaxConnections)
	if off := (protoSet{h1: old.h1 && !p.h1, h2: old.h2 && !p.h2, h3: old.h3 && !p.h3}); off.any() {
		// Tunnels over the protocols turned off drain as a shutdown's
		// do: close frames at the deadline, before the ingress below cuts
		// its connections (so those wait for inner, a grace later).
		// (A forced stop cuts them with the rest: they stay in l.tunnels.)
		inner, cancel := context.WithCancel(context.WithoutCancel(ctx))
		context.AfterFunc(ctx, func() {
			l.tunnels.End(tunnel.CloseGrace, func(t *tunnel.Tunnel) bool { return off.has(t.Protocol()) })
			cancel()
		})
		ctx = inner
	}
	if udp != nil {
		if l.quic, err = l.startQUIC(udp, lim); err != nil {
			udp.Close()
			if tcp != nil {
				tcp.Close()
			}
			return fmt.Errorf("gateway: listener %q: %w", lc.Name, err)
		}
	}
	if tcp != nil {
		l.tcp = l.startTCP(tcp, lim)
	}
	if !p.h3 && l.quic != nil {
		q := l.quic
		l.quic = nil
		l.deps.Drains.Background(l.deps.Log, l.name, func() error { return q.shutdown(ctx, l) }, func() { q.close("shutting down") })
	}
	if !p.tcp() && l.tcp != nil {
		t := l.tcp
		l.tcp = nil
		l.deps.Drains.Background(l.deps.Log, l.name, func() error { return t.shutdown(ctx) }, t.close)
	}
	l.warnFixedLimits(lim)
	l.warnUDPHeader() // udpconn.go
	return nil
}

// Sockets are the bound UDP and TCP sockets (nil: not bound, no
// protocol needs it).
func (l *Listener) Sockets() (net.PacketConn, net.Listener) {
	var udp net.PacketConn
	var tcp net.Listener
	if l.quic != nil {
		udp = l.quic.conn
	}
	if l.tcp != nil {
		tcp = l.tcp.ln
	}
	return udp, tcp
}

// Addr is the bound UDP address, or the TCP one when h3 is off.
func (l *Listener) Addr() net.Addr {
	if l.quic != nil {
		return l.quic.conn.LocalAddr()
	}
	return l.tcp.ln.Addr()
}

func boundPort(udp net.PacketConn, tcp net.Listener) int {
	if udp != nil {
		return udp.LocalAddr().(*net.UDPAddr).Port
	}
	return tcp.Addr().(*net.TCPAddr).Port
}

// bindPair binds a UDP and/or a TCP socket on addr. With port 0 both get
// the same free port: the UDP one is chosen first, and the pair is retried
// when its TCP twin is taken.
func bindPair(addr string, wantUDP, wantTCP bool) (net.PacketConn, net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, &net.OpError{Op: "listen", Net: "udp", Err: err}
	}
	for attempt := 0; ; attempt++ {
		var udp net.PacketConn
		bindAddr := addr
		if wantUDP {
			if udp, err = net.ListenPacket("udp", addr); err != nil {
				return nil, nil, err
			}
			bindAddr = net.JoinHostPort(host, strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port))
		}
		if !wantTCP {
			return udp, nil, nil
		}
		tcp, err := net.Listen("tcp", bindAddr)
		if err == nil {
			return udp, tcp, nil
		}
		if udp != nil {
			udp.Close()
		}
		if port != "0" || !errors.Is(err, syscall.EADDRINUSE) || attempt == 20 {
			return nil, nil, err
		}
	}
}

// names lists the protocols in the order h1, h2, h3.
func (p protoSet) names() []string {
	var s []string
	for _, on := range [...]struct {
		b bool
		n string
	}{{p.h1, ProtocolH1}, {p.h2, ProtocolH2}, {p.h3, ProtocolH3}} {
		if on.b {
			s = append(s, on.n)
		}
	}
	return s
}

func (p protoSet) String() string { return fmt.Sprint(p.names()) }

// Shutdown drains both ingresses: GOAWAY on HTTP/3 and HTTP/2,
// "Connection: close" on HTTP/1.1; in-flight requests run until ctx is
// done, then the remaining connections and the sockets close.
//
// Tunnels are waited for too (net/http forgets hijacked connections). At
// ctx's end they close first, with WebSocket close frames, and get
// tunnel.CloseGrace before the ingresses cut their connections.
func (l *Listener) Shutdown(ctx context.Context) error {
	inner, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var cut atomic.Bool // tunnels were still open at the deadline
	closed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(closed)
		cut.Store(l.tunnels.Count() > 0)
		l.tunnels.CloseAll()
		cancel()
	})
	defer func() {
		if !stop() {
			<-closed // started: it is the drain's last step
		}
	}()
	var wg sync.WaitGroup
	var qerr, terr error
	if q := l.quic; q != nil {
		wg.Go(func() { qerr = q.shutdown(inner, l) })
	}
	if t := l.tcp; t != nil {
		wg.Go(func() { terr = t.shutdown(inner) })
	}
	wg.Go(func() { l.tunnels.Wait(inner) })
	wg.Wait()
	if err := errors.Join(qerr, terr); err != nil && ctx.Err() != nil {
		return fmt.Errorf("gateway: listener %q: %w", l.name, ctx.Err())
	} else if err != nil {
		return err
	}
	if cut.Load() {
		return fmt.Errorf("gateway: listener %q: %w", l.name, ctx.Err())
	}
	return nil
}

// Close stops both ingresses at once (the forced stop).
func (l *Listener) Close() {
	if l.quic != nil {
		l.quic.close("shutting down")
	}
	if l.tcp != nil {
		l.tcp.close()
	}
	l.tunnels.CutAll() // hijacked ones: the servers' Close leaves them open
}

// drainQuiet is how long a draining listener must have no request in flight
// before it closes the connections its clients keep open (or abandoned
// without closing): requests a client sent before it saw GOAWAY have arrived
// by then. A variable for tests.
var drainQuiet = time.Second

// serve hands r to the pipeline, counted among the requests being
// handled; refused is the adapter's answer to it (Status 0: none).
func (l *Listener) serve(w http.ResponseWriter, r *http.Request, refused answer.Answer) {
	l.active.Add(1)
	defer l.active.Add(-1)
	if c := l.client.Load(); c.active() {
		r, refused = c.settleClient(r, refused) // client.go
	}
	l.deps.Pipeline.Serve(l.name, w, r, refused)
}

// Name is the listener's name.
func (l *Listener) Name() string { return l.name }

// Address is the configured address (Config.Address).
func (l *Listener) Address() string { return l.addr }

// Protocols are the protocols served, in the order h1, h2, h3.
func (l *Listener) Protocols() []string { return l.protos.Load().names() }

// InFlight is the number of requests being handled, over every protocol.
func (l *Listener) InFlight() int64 { return l.active.Load() }

// MaxConnections is the connection limit in force (0: none).
func (l *Listener) MaxConnections() int { return int(l.conns.max.Load()) }

// OpenConnections is the connections open, TCP and QUIC together, as
// max_connections counts them.
func (l *Listener) OpenConnections() int64 { return l.conns.open.Load() }

// QUICConns is the number of QUIC connections open (0 without h3).
func (l *Listener) QUICConns() int {
	n := 0
	if l.quic != nil {
		l.quic.conns.Range(func(_, _ any) bool { n++; return true })
	}
	return n
}
