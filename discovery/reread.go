package discovery

import (
	"context"
	"time"
)

// fetchMoved is a service watch's fetch under the change feed. The first
// read (index 0, also the one after a failure) is made at once. Later ones
// wait until the feed moves the service, or a move promised a newer index
// than the last read returned (a server behind, with stale reads); then the
// service is re-read with index= and a short wait, in one of the Client's
// read slots. A wait that expires with nothing moved is answered as
// "unchanged" without a request while the feed is healthy; while it fails
// the watch keeps waiting and sends nothing (the feed's recovery moves what
// changed meanwhile).
func (c *Client) fetchMoved(ctx context.Context, q Query, endpoint string, f *feed, sub *feedSub, index uint64, wait time.Duration) (healthResult, uint64, error) {
	if index > 0 && !sub.behind() {
		timer := time.NewTimer(wait)
		defer timer.Stop()
	waiting:
		for {
			select {
			case <-sub.moved:
				break waiting
			case <-timer.C:
				if ok, _, _, _ := f.healthy(); ok {
					return healthResult{}, index, nil
				}
				timer.Reset(wait)
			case <-ctx.Done():
				return healthResult{}, 0, ctx.Err()
			}
		}
	}
	var r healthResult
	var got uint64
	err := c.read(ctx, func(ctx context.Context) (err error) {
		r, got, err = c.fetch(ctx, q, endpoint, index, rereadWait)
		return err
	})
	if err != nil {
		return healthResult{}, 0, err
	}
	sub.read(got, r)
	if got == index {
		sub.settle() // nothing newer to wait for: the move was not one
	}
	return r, got, nil
}

// settle drops what a move promised.
func (s *feedSub) settle() {
	s.mu.Lock()
	s.want = 0
	s.mu.Unlock()
}
