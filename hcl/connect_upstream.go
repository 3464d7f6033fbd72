package hcl

import (
	"fmt"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// Connect upstreams (issue 23 item 4): upstream { consul { service = "db",
// connect = true } }.

// Protocols of a Connect upstream (UpstreamConsul.Protocol), named as
// Consul's service-defaults protocol.
const (
	// ConnectProtocolHTTP is HTTP/1.1 (ALPN http/1.1), the default:
	// Consul's own default service protocol is "tcp", which its proxies
	// forward as opaque bytes, and HTTP/1.1 is what such a byte stream to
	// an HTTP application carries most often; an HTTP/2 or gRPC service
	// says so (protocol = "http2" or "grpc"), as it must in Consul's
	// service-defaults for L7 features.
	ConnectProtocolHTTP = "http"
	// ConnectProtocolHTTP2 is HTTP/2 over the mTLS connection (ALPN h2).
	ConnectProtocolHTTP2 = "http2"
	// ConnectProtocolGRPC is gRPC, HTTP/2 like ConnectProtocolHTTP2.
	ConnectProtocolGRPC = "grpc"
)

// buildConnectUpstream reads consul.connect and consul.protocol into c and
// checks them against the rest of upstream r:
//   - connect = true needs a top-level connect block (the identity the
//     instances are dialled with): checkConnectUpstreams, after every block
//     is read;
//   - it excludes static backend blocks, a tls block and consul.scheme:
//     every instance is a Connect peer dialled with the Connect leaf;
//   - protocol is only for connect = true.
//
// Errors are at the offending argument or block.
func buildConnectUpstream(ub blk, r *rawUpstream, c *UpstreamConsul) {
	rc := r.Consul
	b := ub.child("consul", rc.DefRange)
	c.Connect = b.boolean(rc.Connect, false)
	if rc.Connect != nil {
		c.ConnectRange = rc.Connect.Expr.Range()
	}
	if !c.Connect {
		if rc.Protocol != nil {
			b.errorf(rc.Protocol, "", "Unexpected argument",
				"protocol is what a Connect upstream speaks inside its mTLS connection; it needs connect = true (use scheme for other Consul upstreams).")
		}
		return
	}
	c.Protocol = b.oneOf(rc.Protocol, ConnectProtocolHTTP, ConnectProtocolHTTP, ConnectProtocolHTTP2, ConnectProtocolGRPC)
	c.Scheme = "http" // HTTP/1.1 inside the mTLS connection
	if c.Protocol != ConnectProtocolHTTP {
		c.Scheme = "https" // HTTP/2 inside it
	}
	if rc.Scheme != nil {
		b.errorf(rc.Scheme, "", "Conflicting arguments",
			"a connect = true upstream is dialled with mTLS under the Connect identity; use protocol (\"http\", \"http2\" or \"grpc\") instead of scheme.")
	}
	for _, be := range r.Backends {
		rng := be.DefRange
		ub.add(hcl2.DiagError, &rng, "Conflicting blocks",
			ub.field("backend")+": an upstream with consul { connect = true } reaches only Connect instances of its service; move static backends to another upstream.")
	}
	if r.TLS != nil {
		rng := r.TLS.DefRange
		ub.add(hcl2.DiagError, &rng, "Conflicting blocks",
			ub.field("tls")+": a connect = true upstream takes its TLS from the Connect leaf certificate and CA roots; remove the tls block.")
	}
}

// checkConnectUpstreams requires the top-level connect block for every
// upstream with consul { connect = true }. Errors are at the connect
// argument.
func checkConnectUpstreams(top blk, c *Config, raws []*rawUpstream) {
	if c.Connect != nil {
		return
	}
	for _, r := range raws {
		if r.Consul == nil || r.Consul.Connect == nil {
			continue
		}
		for _, u := range c.Upstreams {
			if u.Name != r.Name || u.Consul == nil || !u.Consul.Connect {
				continue
			}
			b := top.child(fmt.Sprintf("upstream %q", r.Name), r.DefRange).child("consul", r.Consul.DefRange)
			b.errorf(r.Consul.Connect, "", "Missing connect block",
				"connect = true dials the service's Connect instances under the gateway's Connect identity: add a top-level connect { service = \"NAME\" } block.")
		}
	}
}
