package ingress

import (
	"crypto/tls"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/clientaddr"
	"github.com/impulse-agent/impulse-agent/gateway/mesh"
	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
)

// Config is one listener: HTTP/3 on a UDP socket and HTTP/1.1 and
// HTTP/2 over TLS on a TCP socket, on the same address and port, every
// protocol served by the same request pipeline.
type Config struct {
	Name string
	// Address is host:port for both sockets; port 0 picks a port free for
	// both UDP and TCP (see Addrs).
	Address string
	// Protocols are the protocols served: ProtocolH1, ProtocolH2 and
	// ProtocolH3 in any combination; empty means all three. On Apply a
	// listener whose name and address are unchanged keeps its sockets and
	// connections; a socket no protocol needs any more drains.
	Protocols []string
	// TLS is the server configuration. QUIC enforces TLS 1.3; the TCP side
	// accepts TLS 1.2 and later (MinVersion is lowered for it). On Apply, a
	// listener whose name and address are unchanged switches to the new TLS
	// for new handshakes.
	TLS *tls.Config
	// Mesh, when set, makes this a Consul Connect (service mesh) listener
	// and replaces TLS (which must then be nil): the leaf certificate,
	// client certificates required and verified against the current CA
	// roots, L4 intentions at the handshake (mesh.Inbound.ServerTLS), and
	// every request authorized by the pipeline (L7, 403 intention_denied).
	// Over TCP, ALPN offers h2 and http/1.1 as the protocols allow, as
	// Envoy sidecars expect. Several listeners may share one Inbound.
	Mesh *mesh.Inbound
	// AltSvcPort is the UDP port advertised in Alt-Svc over TCP (RFC 7838):
	// a listener behind NAT or a port-mapping balancer advertises the port
	// clients reach; 0 means the listener's own port.
	AltSvcPort int
	// AltSvcMaxAge is the Alt-Svc ma parameter (0 means 24h; whole seconds).
	AltSvcMaxAge time.Duration

	// ForwardClientCert adds an X-Forwarded-Client-Cert field (Envoy's
	// format, certs.Identity.XFCC) to requests whose client certificate the
	// handshake verified. A client's own X-Forwarded-Client-Cert is removed
	// whatever this says. Apply switches it for a running listener.
	ForwardClientCert bool
	// CertificateExpiry is the NotAfter of each certificate TLS serves, by
	// name (certs.Store.Expiries: "default", or a certificate's first DNS
	// SAN), exported as impulse_tls_certificate_expiry_seconds{listener,name}
	// (seconds until then). nil: no such series.
	CertificateExpiry map[string]time.Time
	// EarlyData offers and accepts 0-RTT on the QUIC side (RFC 9001 §4.6;
	// session tickets allow resumption either way). A request handled
	// before its connection's handshake completed is forwarded with
	// "Early-Data: 1" when its method is safe and answered 425 too_early
	// otherwise (RFC 8470 §5). Go's TLS server has no early data, so TCP is
	// unaffected. On Apply it applies to new connections.
	EarlyData bool
	// Limits are the listener's protocol limits; zero fields are defaults
	// (see Limits).
	Limits Limits
	// RateLimit limits the requests routed through this listener, applied
	// right after routing and before the upstream's (ratelimit.Config); nil means none. On Apply an unchanged block
	// keeps its buckets, a changed one starts with an empty table.
	RateLimit *ratelimit.Config

	// ProxyProtocol reads HAProxy PROXY protocol headers (v1 and v2) on the
	// TCP socket, before TLS, and with its UDP set SPP or PROXY v2 headers
	// on QUIC datagrams (see ProxyProtocol); nil means none. Apply switches
	// it for new connections and the next datagram (UDP itself: for a UDP
	// socket bound with it).
	ProxyProtocol *ProxyProtocol
	// ForwardedTrusted are the forwarders whose X-Forwarded-For (or RFC
	// 7239 Forwarded) is believed, over every protocol: from a peer in it,
	// the right-most entry it does not hold is the client address
	// (clientaddr.FromHeaders); nil means no header is believed. The peer
	// is still what the gateway appends to X-Forwarded-For. Apply switches
	// it at once.
	ForwardedTrusted clientaddr.Prefixes
	// IPRules refuse clients, by the client address settled above, with 403
	// ip_denied before routing (deny wins; an empty allow list allows all).
	// Apply switches them at once.
	IPRules clientaddr.Rules
}

// Protocols a listener serves (ListenerConfig.Protocols), and the values of
// the protocol label of the request metrics.
const (
	ProtocolH1 = "h1" // HTTP/1.1 over TLS (ALPN http/1.1, or none)
	ProtocolH2 = "h2" // HTTP/2 over TLS (ALPN h2, RFC 9113 §3.2)
	ProtocolH3 = "h3" // HTTP/3 over QUIC (ALPN h3, RFC 9114 §3.1)
)
