package hcl

import (
	hcl2 "github.com/hashicorp/hcl/v2"
)

// listenerProtocols reads protocols, or the deprecated protocol: "h1", "h2"
// and "h3" in any non-empty combination without duplicates (default
// DefaultListenerProtocols). protocol = "http3" means ["h3"] and draws a
// deprecation warning at its line; setting both is an error.
func (b blk) listenerProtocols(r *rawListener) []string {
	if r.Protocol != nil {
		p := b.str(r.Protocol, "")
		switch {
		case r.Protocols != nil:
			b.errorf(r.Protocol, "", "Conflicting attributes", "protocol is deprecated and cannot be combined with protocols; remove it.")
		case p == "http3":
			b.add(hcl2.DiagWarning, b.subject(r.Protocol), "Deprecated attribute",
				b.field("protocol")+`: protocol = "http3" is deprecated; it means protocols = ["h3"] (HTTP/3 only). The default is now ["h1", "h2", "h3"]: write protocols explicitly.`)
			return []string{"h3"}
		default:
			b.errorf(r.Protocol, "", "Unsupported protocol", `protocol is deprecated and only "http3" is accepted; got %q. Use protocols = ["h1", "h2", "h3"] (any subset).`, p)
			return []string{"h3"}
		}
	}
	if r.Protocols == nil {
		return append([]string(nil), DefaultListenerProtocols...)
	}
	before := b.errCount()
	seen := map[string]bool{}
	out := b.strList(r.Protocols, func(s string) string {
		switch {
		case s != "h1" && s != "h2" && s != "h3":
			return `"` + s + `" is not a protocol; use "h1" (HTTP/1.1 over TLS), "h2" (HTTP/2 over TLS) or "h3" (HTTP/3 over QUIC)`
		case seen[s]:
			return `"` + s + `" is listed twice`
		}
		seen[s] = true
		return ""
	})
	if len(out) == 0 && b.errCount() == before {
		b.errorf(r.Protocols, "", "No protocol", `protocols must list at least one of "h1", "h2" and "h3".`)
	}
	if len(out) == 0 {
		return append([]string(nil), DefaultListenerProtocols...)
	}
	return out
}
