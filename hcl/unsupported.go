package hcl

import (
	hcl2 "github.com/hashicorp/hcl/v2"
)

// notYetSupported lists the features the schema accepts and validates but the
// gateway does not implement yet, keyed by feature name, with a description
// for the warning. Using one of them yields a "Not yet supported" warning at
// its source range instead of being silently ignored. When the gateway gains
// a feature, delete its line here (and its expected warning in
// testdata/good/*.golden).
var notYetSupported = map[string]string{
	"connect.native": "native = true (registering the gateway's service as Connect-native, issue 23)",
}

// NotYetSupported reports whether feature (a key such as
// "upstream.limits.max_queue") is parsed but not yet implemented by the
// gateway.
func NotYetSupported(feature string) bool {
	_, ok := notYetSupported[feature]
	return ok
}

// unsupported adds a "Not yet supported" warning for feature at subject when
// the feature is still listed in notYetSupported.
func (b blk) unsupported(feature string, subject hcl2.Range) {
	desc, ok := notYetSupported[feature]
	if !ok {
		return
	}
	detail := desc + " is accepted but not yet supported by the gateway; it has no effect."
	if p := b.field(""); p != "" {
		detail = p + ": " + detail
	}
	b.add(hcl2.DiagWarning, &subject, "Not yet supported", detail)
}
