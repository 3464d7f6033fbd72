package agent

import (
	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/gateway/mesh"
)

// Conversions from discovery's Connect values to gateway/mesh's: the one
// place where the two meet (architecture.md "Agent converts"). Not wired
// yet: the mesh listeners and upstreams of issue 23 will use them.

// meshIntentions converts discovery's intentions (Consul's order kept) for
// mesh.Compile. A permission with a JWT requirement is marked unsupported,
// so its intention denies.
func meshIntentions(in []discovery.Intention) []mesh.Intention {
	out := make([]mesh.Intention, 0, len(in))
	for _, x := range in {
		ix := mesh.Intention{ID: x.ID, SourcePeer: x.SourcePeer, SourcePartition: x.SourcePartition, SourceNS: x.SourceNS,
			SourceName: x.SourceName, DestinationNS: x.DestinationNS, DestinationName: x.DestinationName,
			Action: x.Action, Precedence: x.Precedence}
		if ix.ID == "" {
			// Config-entry intentions have no legacy ID: name them by
			// their source, as problems and decisions report them.
			ix.ID = x.SourceName + " -> " + x.DestinationName
		}
		if x.SourceType != "" && x.SourceType != "consul" {
			ix.SourcePeer = "type:" + x.SourceType // a source kind no identity here carries
		}
		for _, p := range x.Permissions {
			mp := mesh.Permission{Action: p.Action}
			if p.JWT {
				mp.Unsupported = "JWT"
			}
			if h := p.HTTP; h != nil {
				mh := &mesh.HTTPMatch{PathExact: h.PathExact, PathPrefix: h.PathPrefix, PathRegex: h.PathRegex, Methods: h.Methods}
				for _, hd := range h.Header {
					mh.Header = append(mh.Header, mesh.HeaderMatch{Name: hd.Name, Present: hd.Present, Exact: hd.Exact,
						Prefix: hd.Prefix, Suffix: hd.Suffix, Contains: hd.Contains, Regex: hd.Regex,
						Invert: hd.Invert, IgnoreCase: hd.IgnoreCase})
				}
				mp.HTTP = mh
			}
			ix.Permissions = append(ix.Permissions, mp)
		}
		out = append(out, ix)
	}
	return out
}

// meshDefaultAllow reads Consul's ACL default policy: allow only when
// Consul said "allow"; a missing header fails closed.
func meshDefaultAllow(policy string) bool { return policy == discovery.PolicyAllow }

// meshRules compiles a discovery intentions snapshot.
func meshRules(in discovery.Intentions) (*mesh.Rules, []mesh.Problem) {
	return mesh.Compile(meshIntentions(in.Intentions), meshDefaultAllow(in.DefaultPolicy))
}

// meshBundle builds the trust bundle of a roots snapshot.
func meshBundle(r discovery.CARoots) (*mesh.TrustBundle, error) {
	roots := make([]mesh.Root, 0, len(r.Roots))
	for _, x := range r.Roots {
		roots = append(roots, mesh.Root{ID: x.ID, CertPEM: x.RootCertPEM, IntermediatePEMs: x.IntermediatePEMs})
	}
	return mesh.NewTrustBundle(r.TrustDomain, roots)
}
