package hcl

import (
	"fmt"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// Connect is the top-level connect block (issue 23, interface.md): the
// gateway's Consul Connect (service mesh) identity: the agent watches its
// leaf certificate, the CA roots and its intentions, which the mesh
// listeners (listener { connect = true }) serve and enforce. native = true
// is parsed but not yet supported (a warning says so). Comparable: == tells whether a reload changed it.
type Connect struct {
	// Service is the identity's Consul service name (`service`, required):
	// the agent's leaf certificate is for
	// spiffe://<trust-domain>/ns/default/dc/<dc>/svc/<Service>. Letters,
	// digits, ".", "-" and "_" only (a SPIFFE path segment, SPIFFE-ID spec
	// §2.2), at most 64 bytes.
	Service string
	// Native registers the gateway's own service as Connect-native
	// (`native`, default false): an edge gateway in the mesh.
	Native bool
	// Native is parsed, not yet supported (a "Not yet supported" warning).
	//
	// Range is the block's definition range, ServiceRange the service
	// argument's (zero when absent), for later diagnostics.
	Range, ServiceRange hcl2.Range
}

// rawConnect is the top-level connect block.
type rawConnect struct {
	DefRange hcl2.Range `hcl:",def_range"`

	Service *hcl2.Attribute `hcl:"service,optional"`
	Native  *hcl2.Attribute `hcl:"native,optional"`
}

func (r *rawConnect) defRange() hcl2.Range { return r.DefRange }

// maxConnectService bounds connect.service: a DNS label's length, so the
// outbound SNI <service>.default.<dc>.internal.<trust-domain> stays a
// valid name.
const maxConnectService = 63

// buildConnect converts the connect block (nil: no mesh identity).
func buildConnect(top blk, r *rawConnect) *Connect {
	if r == nil {
		return nil
	}
	b := top.child("connect", r.DefRange)
	c := &Connect{Range: r.DefRange, Native: b.boolean(r.Native, false)}
	if r.Service == nil {
		b.blockErrorf("Missing required argument",
			"the service of the mesh identity is required, e.g. service = \"web\" (the leaf certificate's SPIFFE ID names it).")
		return c
	}
	c.ServiceRange = r.Service.Expr.Range()
	s, ok := b.strOK(r.Service, "")
	if !ok {
		return c
	}
	if why := checkConnectService(s); why != "" {
		b.errorf(r.Service, "", "Invalid service name", "%s", why)
		return c
	}
	c.Service = s
	if c.Native {
		b.unsupported("connect.native", r.Native.Expr.Range())
	}
	return c
}

// checkConnectService says what is wrong with a Connect service name, ""
// when nothing: it must be a SPIFFE path segment (SPIFFE-ID spec §2.2:
// letters, digits, ".", "-", "_"; not "." or "..") and at most
// maxConnectService bytes. gateway/mesh.ParseServiceID refuses the same.
func checkConnectService(s string) string {
	switch {
	case s == "":
		return "must not be empty."
	case len(s) > maxConnectService:
		return fmt.Sprintf("%q is longer than %d bytes.", s, maxConnectService)
	case s == "." || s == "..":
		return fmt.Sprintf("%q cannot name a service.", s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return fmt.Sprintf("%q: byte %q is not allowed; a service name in a SPIFFE ID holds only letters, digits, \".\", \"-\" and \"_\".", s, c)
		}
	}
	return ""
}

// checkMeshListeners checks the listeners with connect = true against the
// connect block: one is required (the mesh identity they serve), and such
// a listener has no tls block (its TLS comes from the leaf certificate)
// and no early_data = true. Errors are at the connect argument, the tls
// block and early_data.
func checkMeshListeners(top blk, c *Config, raws []*rawListener) {
	mesh, early := map[string]bool{}, map[string]bool{}
	for _, l := range c.Listeners {
		mesh[l.Name], early[l.Name] = l.Connect, l.EarlyData
	}
	for _, r := range raws {
		if r.Connect == nil || !mesh[r.Name] {
			continue
		}
		b := top.child(fmt.Sprintf("listener %q", r.Name), r.DefRange)
		if c.Connect == nil {
			b.errorf(r.Connect, "", "Missing connect block",
				"connect = true makes this a service mesh listener, which serves the gateway's Connect identity: add a top-level connect { service = \"NAME\" } block.")
		}
		if r.EarlyData != nil && early[r.Name] {
			b.errorf(r.EarlyData, "", "Conflicting arguments",
				"a connect = true listener does not accept early data (0-RTT requests arrive before the handshake has verified the peer's certificate); remove early_data.")
		}
		if r.TLS != nil {
			rng := r.TLS.DefRange
			b.add(hcl2.DiagError, &rng, "Conflicting blocks",
				b.field("tls")+": a connect = true listener takes its TLS from the Connect leaf certificate (client certificates required, intentions enforced); remove the tls block.")
		}
	}
}
