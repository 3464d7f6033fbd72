package agent

import (
	"net/netip"
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway"
)

// TestClientAddressConverted: proxy_protocol, forwarded_headers, ip_allow
// and ip_deny reach the gateway as parsed prefixes; mode optional is
// Optional; udp "spp", "v2" and "" are gateway.UDPSPP, UDPProxyV2 and
// UDPNone; absent blocks are nil.
func TestClientAddressConverted(t *testing.T) {
	gc := convertedConfig(t, `
listener "public" {
  address = "127.0.0.1:0"
  tls {
    cert_file = "%[1]s"
    key_file  = "%[2]s"
  }
  proxy_protocol {
    trusted = ["10.0.0.0/8"]
    mode    = "optional"
    udp     = "spp"
  }
  forwarded_headers { trusted = ["127.0.0.1/32", "2001:db8::/32"] }
  ip_allow = ["192.0.2.0/24"]
  ip_deny  = ["192.0.2.7/32"]
}
listener "plain" {
  address = "127.0.0.2:0"
  tls {
    cert_file = "%[1]s"
    key_file  = "%[2]s"
  }
}
listener "quic" {
  address   = "127.0.0.3:0"
  protocols = ["h3"]
  tls {
    cert_file = "%[1]s"
    key_file  = "%[2]s"
  }
  proxy_protocol {
    trusted = ["10.0.0.0/8"]
    udp     = "v2"
  }
}
listener "tcp" {
  address = "127.0.0.4:0"
  tls {
    cert_file = "%[1]s"
    key_file  = "%[2]s"
  }
  proxy_protocol { trusted = ["10.0.0.0/8"] }
}
upstream "api" {
  route {
    ip_allow = ["10.0.0.0/8"]
  }
  backend "a" { address = "http://127.0.0.1:9000" }
}
`)
	pub, plain, quic, tcp := gc.Listeners[0], gc.Listeners[1], gc.Listeners[2], gc.Listeners[3]
	a := netip.MustParseAddr
	if pp := pub.ProxyProtocol; pp == nil || !pp.Optional || !pp.Trusted.Contains(a("10.2.3.4")) || pp.Trusted.Contains(a("11.0.0.1")) || pp.UDP != gateway.UDPSPP {
		t.Errorf("proxy_protocol %+v", pp)
	}
	if pp := quic.ProxyProtocol; pp == nil || pp.Optional || pp.UDP != gateway.UDPProxyV2 {
		t.Errorf("udp v2: proxy_protocol %+v", pp)
	}
	if pp := tcp.ProxyProtocol; pp == nil || pp.UDP != gateway.UDPNone {
		t.Errorf("tcp only: proxy_protocol %+v", pp)
	}
	if ft := pub.ForwardedTrusted; len(ft) != 2 || !ft.Contains(a("127.0.0.1")) || !ft.Contains(a("2001:db8::1")) {
		t.Errorf("forwarded_headers trusted %v", ft)
	}
	if r := pub.IPRules; !r.Allows(a("192.0.2.1")) || r.Allows(a("192.0.2.7")) || r.Allows(a("198.51.100.1")) {
		t.Errorf("listener ip rules %+v", r)
	}
	if plain.ProxyProtocol != nil || plain.ForwardedTrusted != nil || !plain.IPRules.Empty() {
		t.Errorf("a listener without the settings: %+v %v %+v", plain.ProxyProtocol, plain.ForwardedTrusted, plain.IPRules)
	}
	if r := gc.Upstreams[0].Routes[0].IPRules; !r.Allows(a("10.0.0.1")) || r.Allows(a("127.0.0.1")) {
		t.Errorf("route ip rules %+v", r)
	}
}
