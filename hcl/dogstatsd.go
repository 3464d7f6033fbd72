package hcl

import (
	"net"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// dogstatsdAddress converts telemetry.dogstatsd_address (host:port, empty =
// off) and resolves its host now: the agent's DogStatsD client cannot
// start without an address, so a name that does not resolve is an error
// in validate and on reload as at startup ("Cannot reach DogStatsD
// address", the agent's words), not a load that passes and then a start
// that fails.
func (b blk) dogstatsdAddress(a *hcl2.Attribute) string {
	s := b.sinkAddress(a, "telemetry.dogstatsd_address")
	if s == "" || checkHostPort(s, false, false) != "" {
		return s
	}
	// The lookup datadog-go's statsd.New makes when the agent starts.
	if _, err := net.ResolveUDPAddr("udp", s); err != nil {
		b.errorf(a, "", "Cannot reach DogStatsD address", "%v.", err)
	}
	return s
}

// dogstatsdTagsAlone warns at dogstatsd_tags when they are set without a
// dogstatsd_address: no metric will carry them.
func (b blk) dogstatsdTagsAlone(tags *hcl2.Attribute, tagList []string, address string) {
	if tags != nil && len(tagList) > 0 && address == "" {
		b.add(hcl2.DiagWarning, b.subject(tags), "No effect",
			b.field(tags.Name)+": tags are only sent with DogStatsD metrics, and dogstatsd_address is not set.")
	}
}
