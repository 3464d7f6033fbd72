// Package discovery watches Consul's health endpoint and emits the full set of
// usable instances of a service whenever that set changes; [Client.WatchCatalog]
// does the same for the services of /v1/catalog/services that carry tags with
// a given prefix.
//
// It owns the consul/api client and knows nothing about the gateway or the
// HCL configuration: callers describe what to watch with a [Query] and receive
// Consul-free [Snapshot] values.
//
// Each [Client.Watch] and [Client.WatchCatalog] runs one blocking-query loop.
// The loop is split in two:
//
//   - a fetch performs exactly one blocking call for a given index and returns
//     the result, the X-Consul-Index of the reply and an error;
//   - a generic loop owns the index (the rules of the Consul "Blocking Queries →
//     Implementation details" documentation: same index means no change, an
//     index that goes backwards resets to 0, an index below 1 is replaced by
//     1; and, beyond the documentation, the first query after a failure is a
//     non-blocking read so a restarted cluster is seen at once), the
//     token-bucket rate limit, the retries with jittered exponential backoff
//     and stopping on its context.
//
// Errors (transport failures, timeouts, 5xx, 403 ACL denied) never produce a
// snapshot: the last emitted set stays the truth until Consul answers again.
// They are logged, counted in metrics and visible through [Client.Status].
//
// Nor does a successful answer right after an outage, an index reset or a
// takeover ([Client.WatchFrom]) empty what was known while Consul may be
// refilling a lost state: for Config.ResyncGrace, an empty instance set and
// the services missing from a catalog are kept (see runWatch).
package discovery
