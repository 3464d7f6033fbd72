package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"

	"github.com/hashicorp/consul/api"
)

// Reasons label the discovery.query.errors metric and prefix error messages.
// The set is bounded: HTTP statuses appear as "http_<code>".
const (
	reasonTimeout     = "timeout"      // client timeout (RequestTimeout) expired
	reasonTransport   = "transport"    // connection refused/reset, DNS, TLS …
	reasonDecode      = "decode"       // a 200 reply whose body is not the expected JSON
	reasonACLFiltered = "acl_filtered" // empty reply flagged X-Consul-Results-Filtered-By-ACLs
)

// queryError is one failed query. It names the endpoint and, for HTTP
// failures, the status; it never carries the token (consul/api sends it only
// in the X-Consul-Token header, so URLs in wrapped errors are token-free).
type queryError struct {
	endpoint string // e.g. "/v1/health/service/web"
	status   int    // HTTP status, 0 when none
	reason   string // metric label, see the reason constants
	err      error
	hint     string // what to change, for a TLS or scheme mismatch (Client.hint); "" when none
}

func (e *queryError) Error() string {
	s := fmt.Sprintf("discovery: GET %s: %s: %v", e.endpoint, e.reason, e.err)
	if e.status != 0 {
		s = fmt.Sprintf("discovery: GET %s: status %d: %v", e.endpoint, e.status, e.err)
	}
	if e.hint != "" {
		s += " (" + e.hint + ")"
	}
	return s
}

func (e *queryError) Unwrap() error { return e.err }

// errACLFiltered reports an empty reply that ACLs filtered: the token may not
// read the service, which must not be mistaken for "no instances" (case B07).
var errACLFiltered = errors.New("empty result filtered by ACLs (X-Consul-Results-Filtered-By-ACLs: true); the token lacks service:read or node:read")

// classify wraps err from one query of endpoint into a *queryError.
func classify(endpoint string, err error) *queryError {
	qe := &queryError{endpoint: endpoint, reason: reasonTransport, err: err}
	var se api.StatusError
	var ne net.Error
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		qe.status, qe.reason = se.Code, statusReason(se.Code)
		qe.err = errors.New(truncate(se.Body, 256))
	case errors.Is(err, errACLFiltered):
		qe.reason = reasonACLFiltered
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		qe.reason = reasonTimeout
	case errors.As(err, &syntaxErr), errors.As(err, &typeErr):
		qe.reason = reasonDecode
	}
	return qe
}

// truncate shortens s to at most n bytes plus an ellipsis, so an HTML error
// page from a proxy does not flood the log.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
