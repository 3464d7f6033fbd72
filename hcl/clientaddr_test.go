package hcl

import (
	"slices"
	"testing"
)

// TestClientAddress: proxy_protocol, forwarded_headers, ip_allow and
// ip_deny are read with their defaults (mode required, udp ""; absent
// blocks nil; empty lists when absent); udp "spp" and "v2" are kept, and
// an h3-only listener with udp set gets no "No effect" warning.
func TestClientAddress(t *testing.T) {
	cfg, diags := Load([]string{"testdata/good/client_address.hcl"})
	if diags.HasErrors() || len(diags) > 0 {
		t.Fatal(diags)
	}
	pub, inner, quic := cfg.Listeners[0], cfg.Listeners[1], cfg.Listeners[2]
	if pp := pub.ProxyProtocol; pp == nil || pp.Mode != ProxyProtocolRequired || !slices.Equal(pp.Trusted, []string{"10.0.0.0/8", "2001:db8::/32"}) || pp.Range.Start.Line != 8 || pp.UDP != ProxyProtocolUDPSPP {
		t.Errorf("public proxy_protocol: %+v", pp)
	}
	if pp := quic.ProxyProtocol; pp == nil || pp.UDP != ProxyProtocolUDPV2 {
		t.Errorf("quic proxy_protocol: %+v", pp)
	}
	if fh := pub.ForwardedHeaders; fh == nil || !slices.Equal(fh.Trusted, []string{"127.0.0.1/32"}) {
		t.Errorf("public forwarded_headers: %+v", fh)
	}
	if !slices.Equal(pub.IPDeny, []string{"192.0.2.0/24"}) || pub.IPAllow != nil {
		t.Errorf("public ip rules: allow %v deny %v", pub.IPAllow, pub.IPDeny)
	}
	if pp := inner.ProxyProtocol; pp == nil || pp.Mode != ProxyProtocolOptional || pp.UDP != "" {
		t.Errorf("inner proxy_protocol: %+v", pp)
	}
	if fh := inner.ForwardedHeaders; fh == nil || len(fh.Trusted) != 0 {
		t.Errorf("an empty forwarded_headers block: %+v", fh)
	}
	rt := cfg.Upstreams[0].Routes[0]
	if !slices.Equal(rt.IPAllow, []string{"10.0.0.0/8"}) || !slices.Equal(rt.IPDeny, []string{"10.9.0.0/16"}) {
		t.Errorf("route ip rules: allow %v deny %v", rt.IPAllow, rt.IPDeny)
	}

	cfg, diags = Load([]string{"testdata/good/minimal.hcl"})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if l := cfg.Listeners[0]; l.ProxyProtocol != nil || l.ForwardedHeaders != nil || l.IPAllow != nil || l.IPDeny != nil {
		t.Errorf("minimal listener: %+v", l)
	}
}

func TestCheckCIDR(t *testing.T) {
	for _, ok := range []string{"10.0.0.0/8", "10.1.2.3/8", "0.0.0.0/0", "::/0", "2001:db8::/32", "127.0.0.1/32"} {
		if why := checkCIDR(ok); why != "" {
			t.Errorf("checkCIDR(%q) = %q", ok, why)
		}
	}
	for _, bad := range []string{"", "10.0.0.1", "10.0.0.0/33", "fe80::1%eth0/64", "10.0.0.0/8 ", "x/8"} {
		if why := checkCIDR(bad); why == "" {
			t.Errorf("checkCIDR(%q) accepted", bad)
		}
	}
}
