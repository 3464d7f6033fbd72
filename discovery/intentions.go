package discovery

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/hashicorp/consul/api"
)

// DecodeIntentionMatch decodes the body of a
// /v1/connect/intentions/match?by=destination&name=<service> reply (a JSON
// object mapping each name asked for to its intentions, highest precedence
// first) into the intentions of service, as [Client.WatchIntentions] emits
// them. A name missing from the object has no intention. Errors: the body is
// not that JSON (wrapped *json.SyntaxError or *json.UnmarshalTypeError).
func DecodeIntentionMatch(body []byte, service string) ([]Intention, error) {
	var m map[string][]*api.Intention
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("discovery: intentions of %s: %w", service, err)
	}
	return intentionsFrom(m[service]), nil
}

// intentionsFrom converts Consul's intentions, keeping their order and
// dropping nil entries.
func intentionsFrom(in []*api.Intention) []Intention {
	out := make([]Intention, 0, len(in))
	for _, x := range in {
		if x == nil {
			continue
		}
		ix := Intention{
			ID: x.ID, Description: x.Description,
			SourcePeer: x.SourcePeer, SourcePartition: x.SourcePartition, SourceNS: x.SourceNS, SourceName: x.SourceName,
			SourceType:           string(x.SourceType),
			DestinationPartition: x.DestinationPartition, DestinationNS: x.DestinationNS, DestinationName: x.DestinationName,
			Action: string(x.Action), Precedence: x.Precedence,
		}
		if x.SourceSamenessGroup != "" {
			// Consul 1.16+ (Enterprise): a source this gateway cannot
			// resolve; a peer name that no local identity carries keeps
			// the intention from matching anyone here.
			ix.SourcePeer = "sameness-group:" + x.SourceSamenessGroup
		}
		for _, p := range x.Permissions {
			if p == nil {
				continue
			}
			perm := IntentionPermission{Action: string(p.Action), JWT: p.JWT != nil}
			if h := p.HTTP; h != nil {
				perm.HTTP = &IntentionHTTP{PathExact: h.PathExact, PathPrefix: h.PathPrefix, PathRegex: h.PathRegex,
					Methods: slices.Clone(h.Methods)}
				for _, hd := range h.Header {
					perm.HTTP.Header = append(perm.HTTP.Header, IntentionHeader{Name: hd.Name, Present: hd.Present,
						Exact: hd.Exact, Prefix: hd.Prefix, Suffix: hd.Suffix, Contains: hd.Contains, Regex: hd.Regex,
						Invert: hd.Invert, IgnoreCase: hd.IgnoreCase})
				}
			}
			ix.Permissions = append(ix.Permissions, perm)
		}
		out = append(out, ix)
	}
	return out
}

func (a Intention) equal(b Intention) bool {
	return a.ID == b.ID && a.Description == b.Description && a.SourcePeer == b.SourcePeer &&
		a.SourcePartition == b.SourcePartition && a.SourceNS == b.SourceNS && a.SourceName == b.SourceName &&
		a.SourceType == b.SourceType && a.DestinationPartition == b.DestinationPartition &&
		a.DestinationNS == b.DestinationNS && a.DestinationName == b.DestinationName && a.Action == b.Action &&
		a.Precedence == b.Precedence && slices.EqualFunc(a.Permissions, b.Permissions, IntentionPermission.equal)
}

func (a IntentionPermission) equal(b IntentionPermission) bool {
	if a.Action != b.Action || a.JWT != b.JWT || (a.HTTP == nil) != (b.HTTP == nil) {
		return false
	}
	if a.HTTP == nil {
		return true
	}
	x, y := *a.HTTP, *b.HTTP
	return x.PathExact == y.PathExact && x.PathPrefix == y.PathPrefix && x.PathRegex == y.PathRegex &&
		slices.Equal(x.Methods, y.Methods) && slices.Equal(x.Header, y.Header)
}
