package auth

import (
	"net/http"
	"strings"

	"github.com/impulse-agent/impulse-agent/gateway/wire"
)

// trimOWS is v without the optional whitespace (SP, HTAB) around it: RFC
// 9110 §5.5 says it is not part of a field value. Go's HTTP/1.1 server
// trims it, its HTTP/2 server and quic-go's HTTP/3 layer pass it on, so a
// key sent as "  KEY  " would be let in over one protocol and refused
// over the others without this.
func trimOWS(v string) string { return strings.Trim(v, " \t") }

// deleteSpellings removes the field name (canonical) from h under every
// spelling a backend may read as the same variable: the credential
// fields after a success, and the fields forward auth sets
// (wire.DeleteSpellings, as for X-Forwarded-Client-Cert).
func deleteSpellings(h http.Header, name string) { wire.DeleteSpellings(h, name) }
