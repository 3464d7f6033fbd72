// Package mesh holds the gateway's Consul Connect (service mesh) decisions,
// pure and free of Consul and HCL: the agent converts what discovery
// watches (CA roots, intentions) into these types.
//
//   - Identity: a peer's SPIFFE ID, from its certificate's one URI SAN
//     (spiffe.go; SPIFFE-ID and X509-SVID specifications, Consul's
//     spiffe://<trust-domain>[/ap/<partition>]/ns/<ns>/dc/<dc>/svc/<name>).
//   - Trust: a peer certificate must chain to one of the current CA roots
//     with the intermediates known and sent, and name a trust domain of
//     those roots; a client dialling a service also checks it is that
//     service (trust.go). The roots are an immutable TrustBundle swapped
//     atomically in a Verifier, so rotations need no listener restart.
//   - Authorization: intentions compiled into immutable Rules and decided
//     per connection (L4) and per request (L7) with Consul's semantics
//     (intentions.go, decide.go, match.go; Consul "service-intentions"
//     configuration entry reference and agent/xds/rbac.go, v1.14).
//
// Nothing here allocates on the request path: Rules.Authorize is measured
// at 0 allocations (BenchmarkAuthorize).
package mesh
