package auth

import (
	"crypto/sha256"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/jwks"
)

// Verified tokens are remembered, VerifiedMax per route, each until its
// exp (plus the clock skew), under the SHA-256 of the token (a hash of a
// signed token is no use without the token), with the key set that
// verified it: a client's next request costs a hash and a map lookup
// instead of a signature check (about 1 µs against 100 µs for ES256), and
// a new key set (a refresh that changed it, a rotation, a withdrawn key)
// makes them miss. Refusals are not remembered. A reload builds new
// policies with empty caches.

// verifiedToken is a remembered verification: the set that verified it,
// its exp, sub and the values of the forwarded claims (jwtAuth.claims'
// order).
type verifiedToken struct {
	set     *jwks.Set
	exp     time.Time
	subject string
	values  []string
}

func (a *jwtAuth) cached(key [sha256.Size]byte, set *jwks.Set) (verifiedToken, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	vt, ok := a.verified[key]
	return vt, ok && vt.set == set
}

func (a *jwtAuth) forget(key [sha256.Size]byte) {
	a.mu.Lock()
	delete(a.verified, key)
	a.mu.Unlock()
}

// remember caches a verification until its exp; when the cache is full,
// expired entries go first, then arbitrary ones (basic's remember).
func (a *jwtAuth) remember(key [sha256.Size]byte, vt verifiedToken, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.verified) >= VerifiedMax {
		for k, v := range a.verified {
			if now.After(v.exp.Add(a.skew)) {
				delete(a.verified, k)
			}
		}
		for k := range a.verified {
			if len(a.verified) < VerifiedMax {
				break
			}
			delete(a.verified, k)
		}
	}
	a.verified[key] = vt
}
