package discovery

import (
	"context"
	"time"

	"github.com/hashicorp/consul/api"
)

// fetchMoved is a service watch's fetch under the change feed. The first
// read (index 0, also the one after a failure) is made at once. Later ones
// wait until the feed moves the service, or a move promised a newer index
// than the last read returned (a server behind, with stale reads).
//
// A move that patched check statuses (feedSub.patch: a check entered a
// worse status) is answered from the last read without a request, with
// that read's index (a patched result, which the loop applies whatever its
// index).
//
// Any other move re-reads the service with index= and a short wait, in one
// of the Client's read slots. A wait shorter than Config.Wait (the resync
// grace holds an answer) re-reads when it expires. A full wait that expires
// with nothing moved is answered as "unchanged" without a request. When the
// feed fails, the fetch fails with feedDown: the loop backs off, and its
// read afresh waits until the feed recovers.
func (c *Client) fetchMoved(ctx context.Context, q Query, endpoint string, f *feed, sub *feedSub, index uint64, wait time.Duration) (healthResult, uint64, error) {
	broke, healed, ferr := f.state()
	if index == 0 && ferr != nil {
		// A read afresh after the feed failed: wait until it recovers,
		// so a Consul outage costs no request per service.
		select {
		case <-healed:
		case <-ctx.Done():
			return healthResult{}, 0, ctx.Err()
		}
	}
	if index > 0 && !sub.needsRead() {
		timer := time.NewTimer(wait)
		defer timer.Stop()
	waiting:
		for {
			select {
			case <-broke:
				if _, _, err := f.state(); err != nil {
					return healthResult{}, 0, &feedDown{err}
				}
				broke, _, _ = f.state() // it healed meanwhile
				continue
			case <-sub.moved:
			case <-timer.C:
				if wait < c.cfg.Wait {
					// A shortened wait (the resync grace holds an answer):
					// ask Consul again, as a blocking query would have.
					break waiting
				}
				return healthResult{}, index, nil
			case <-ctx.Done():
				return healthResult{}, 0, ctx.Err()
			}
			if sub.needsRead() {
				break waiting
			}
			if r, ok := sub.patched(q); ok {
				c.patches.Add(1)
				return r, index, nil
			}
		}
	}
	var r healthResult
	var got uint64
	err := c.read(ctx, func(ctx context.Context, a *api.Client) (err error) {
		// A move signalled before this read is sent is in its answer:
		// drop it, or it costs a re-read that waits rereadWait for nothing
		// (after a feed outage, hundreds queued behind the read slots).
		sub.reading()
		r, got, err = c.fetch(ctx, a, q, endpoint, index, rereadWait, FeedRereadLabel)
		return err
	})
	if err != nil {
		return healthResult{}, 0, err
	}
	r = sub.read(q, got, r)
	if got == index {
		sub.settle() // nothing newer to wait for: the move was not one
		c.idleRereads.Add(1)
	}
	return r, got, nil
}

// FeedRereadLabel is the "service" label of the duration of the change
// feed's re-reads of /v1/health/service/<name>, for every service alike.
const FeedRereadLabel = "feed:/v1/health/service"
