package agent

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/gateway/mesh"
	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

// meshSeeds are /v1/connect/intentions/match bodies: as Consul 1.14
// answers (an L7 config entry's source and a wildcard deny), and broken ones.
var meshSeeds = []string{
	`{"web":[{"ID":"","SourceNS":"default","SourceName":"client","DestinationNS":"default","DestinationName":"web","SourcePartition":"default","DestinationPartition":"default","SourceType":"consul","Permissions":[{"Action":"allow","HTTP":{"PathPrefix":"/api/","Methods":["GET"]}},{"Action":"deny","HTTP":{"PathExact":"/admin"}},{"Action":"allow","HTTP":{"PathPrefix":"/ops/","Header":[{"Name":"X-Role","Exact":"ops"}]}}],"Precedence":9},{"SourceNS":"default","SourceName":"*","DestinationNS":"default","DestinationName":"web","SourceType":"consul","Action":"deny","Precedence":8}]}`,
	`{"web":[{"ID":"a1","SourceNS":"*","SourceName":"*","DestinationName":"*","Action":"allow"},{"ID":"a2","SourceName":"client","DestinationName":"web","Action":"deny","Precedence":9}]}`,
	`{"web":[{"SourceName":"client","DestinationName":"web","Permissions":[{"Action":"allow","HTTP":{"PathRegex":"(a"}}]}]}`,
	`{"web":[{"SourceName":"client","SourcePeer":"east","DestinationName":"web","Action":"allow","Precedence":9},null]}`,
	`{"web":[{"SourceName":"client","DestinationName":"web","Permissions":[{"Action":"allow","HTTP":{"Header":[{"Name":"X-Role","Regex":"o.s","Invert":true}]}},{"Action":"deny","JWT":{"Providers":[{"Name":"okta"}]}}]}]}`,
	`{"web":null}`, `{}`, `[]`, `{"web":[{"Precedence":"9"}]}`, ``,
}

// refDecider is what Compile must pick for src, written from Consul's
// rules apart from the code: stable order by precedence (Consul's value, or
// its formula when missing), then the first intention whose source covers
// src. It returns its index in ints, or -1.
func refDecider(ints []mesh.Intention, src mesh.ServiceID) int {
	prec := func(in mesh.Intention) int {
		if in.Precedence > 0 {
			return in.Precedence
		}
		exact := func(ns, n string) int {
			if ns == "*" {
				return 0
			}
			if n == "*" {
				return 1
			}
			return 2
		}
		return 3*(1+exact(in.DestinationNS, in.DestinationName)) - 2 + exact(in.SourceNS, in.SourceName)
	}
	order := make([]int, len(ints))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(prec(ints[b]), prec(ints[a])) })
	def := func(s string) string { return cmp.Or(s, "default") }
	for _, i := range order {
		in := ints[i]
		if in.SourcePeer == "" && def(in.SourcePartition) == def(src.Partition) &&
			(in.SourceNS == "*" || def(in.SourceNS) == def(src.Namespace)) && (in.SourceName == "*" || in.SourceName == src.Service) {
			return i
		}
	}
	return -1
}

// FuzzMeshIntentions: any body of Consul's intentions match endpoint,
// decoded by discovery, converted here and compiled by gateway/mesh, then
// decided for a fuzzed source and request: no panic; problems name given
// intentions; the deciding intention is the one Consul's precedence rules
// pick (refDecider); an invalid intention, and only one, decides ByInvalid
// and denies; an L4 one gives its action; the default applies exactly when
// no intention, or no permission, matched; the connection-time decision
// agrees with the request's; deciding again gives the same answer.
func FuzzMeshIntentions(f *testing.F) {
	for _, s := range meshSeeds {
		f.Add([]byte(s), true, "client", "GET", "/api/x", "ops")
		f.Add([]byte(s), false, "other", "POST", "//admin", "")
	}
	f.Fuzz(func(t *testing.T, body []byte, allow bool, source, method, path, role string) {
		ixns, err := discovery.DecodeIntentionMatch(body, "web")
		if err != nil {
			return
		}
		ints := meshIntentions(ixns)
		policy := discovery.PolicyDeny
		if allow {
			policy = discovery.PolicyAllow
		}
		rules, problems := meshRules(discovery.Intentions{Service: "web", DefaultPolicy: policy, Intentions: ixns})
		bad := map[string]bool{}
		for _, p := range problems {
			if !slices.ContainsFunc(ints, func(in mesh.Intention) bool { return in.ID == p.Intention }) {
				t.Fatalf("problem %v names no intention", p)
			}
			bad[p.Intention] = true
		}
		ns := "default"
		if strings.HasPrefix(source, "ops/") {
			ns, source = "ops", source[4:]
		}
		src := mesh.ServiceID{TrustDomain: "x.consul", Namespace: ns, Datacenter: "dc1", Service: source}
		p, err := mesh.RequestPath(path, pathnorm.PathOptions{})
		if err != nil {
			p = "/"
		}
		req := &mesh.Request{Method: method, Path: p, Host: "web", Header: http.Header{}}
		if role != "" {
			req.Header.Set("X-Role", role)
		}
		d, conn := rules.Authorize(src, req), rules.AuthorizeConn(src)
		if again := rules.Authorize(src, req); again != d {
			t.Fatalf("decided %+v then %+v", d, again)
		}
		ref := refDecider(ints, src)
		if ref < 0 {
			if d.By != mesh.ByDefault || d.Allow != allow || conn != d {
				t.Fatalf("no intention covers %v: request %+v, connection %+v; want the default %v", src, d, conn, allow)
			}
			return
		}
		in := ints[ref]
		if d.Intention != in.ID {
			t.Fatalf("decided by %q, want %q (%+v)", d.Intention, in.ID, in)
		}
		switch {
		case bad[in.ID] && !slices.ContainsFunc(ints, func(o mesh.Intention) bool { return o.ID == in.ID && !sameIntention(o, in) }):
			if d.By != mesh.ByInvalid || d.Allow || conn != d {
				t.Fatalf("an invalid intention decided %+v / %+v", d, conn)
			}
		case d.By == mesh.ByInvalid:
			if !bad[in.ID] {
				t.Fatalf("ByInvalid from an intention without a problem: %+v", in)
			}
		case len(in.Permissions) == 0:
			if d.By != mesh.ByL4 || d.Allow != (in.Action == "allow") || conn != d {
				t.Fatalf("L4 %q decided %+v / %+v", in.Action, d, conn)
			}
		default:
			if conn.By != mesh.NeedsRequest || !conn.Allow {
				t.Fatalf("an L7 source's connection: %+v", conn)
			}
			switch d.By {
			case mesh.ByL7Default:
				if d.Allow != allow {
					t.Fatalf("no permission matched, decided %+v; want the default %v", d, allow)
				}
			case mesh.ByPermission:
				if d.Permission < 0 || d.Permission >= len(in.Permissions) || d.Allow != (in.Permissions[d.Permission].Action == "allow") {
					t.Fatalf("permission decision %+v for %+v", d, in.Permissions)
				}
			case mesh.ByAmbiguousPath:
				if d.Allow || !strings.Contains(req.Path, ";") {
					t.Fatalf("ambiguous path decision %+v for %q", d, req.Path)
				}
			default:
				t.Fatalf("an L7 intention decided %+v", d)
			}
		}
	})
}

// sameIntention compares what decides: two intentions sharing an ID (a
// fuzzed body may repeat one) are told apart only by their content.
func sameIntention(a, b mesh.Intention) bool {
	return a.SourceName == b.SourceName && a.SourceNS == b.SourceNS && a.Action == b.Action &&
		len(a.Permissions) == len(b.Permissions) && a.Precedence == b.Precedence
}

// TestMeshConversion: a roots snapshot becomes a trust bundle naming its
// trust domain; a missing ACL default policy header fails closed.
func TestMeshConversion(t *testing.T) {
	if meshDefaultAllow("") || !meshDefaultAllow("allow") || meshDefaultAllow("deny") {
		t.Fatal("meshDefaultAllow: allow only for \"allow\"")
	}
	if _, err := meshBundle(discovery.CARoots{TrustDomain: "x.consul"}); err == nil {
		t.Fatal("a bundle without roots")
	}
	ints := meshIntentions([]discovery.Intention{{SourceName: "c", DestinationName: "web", SourceType: "consul",
		Permissions: []discovery.IntentionPermission{{Action: "allow", JWT: true}}}})
	if ints[0].ID != "c -> web" || ints[0].Permissions[0].Unsupported != "JWT" || ints[0].SourcePeer != "" {
		t.Fatalf("converted %+v", ints[0])
	}
}
