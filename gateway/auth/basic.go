package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/impulse-agent/impulse-agent/internal/credfile"
)

// Cache of verified basic credentials: bcrypt costs tens of milliseconds a
// check by design (cost 10: about 50 ms of a core), which every request
// of a client would pay. A successful verification is remembered for
// VerifiedTTL, under an HMAC-SHA-256 of "user:password" keyed by a random
// secret of the policy (never the password, nor a plain hash a memory
// dump could brute-force faster than bcrypt), at most VerifiedMax entries
// per route. A reload builds new policies with empty caches, so a user
// removed or re-hashed stops working at once. Failures are not cached:
// each costs a bcrypt comparison.
const (
	VerifiedTTL = time.Minute
	VerifiedMax = 1024
)

// basic checks HTTP Basic credentials (RFC 7617) against bcrypt hashes.
type basic struct {
	challenge string // WWW-Authenticate value
	users     map[string][]byte
	// dummy is compared with when the user is unknown, so that an unknown
	// user costs what a known one does (no user enumeration by timing): a
	// hash of the file at its median cost (dummyOf).
	dummy []byte

	mu       sync.Mutex
	secret   [32]byte
	verified map[[sha256.Size]byte]verified
}

type verified struct {
	user    string
	expires time.Time
}

// dummyHash is compared with when a users file is empty: a bcrypt hash of
// a random password at bcrypt.DefaultCost.
var dummyHash = sync.OnceValue(func() []byte {
	var pw [16]byte
	_, _ = rand.Read(pw[:])
	h, _ := bcrypt.GenerateFromPassword(pw[:], bcrypt.DefaultCost)
	return h
})

func newBasic(c BasicConfig) *basic {
	b := &basic{challenge: "Basic realm=" + strconv.Quote(c.Realm) + `, charset="UTF-8"`,
		users: make(map[string][]byte, len(c.Users)), verified: map[[sha256.Size]byte]verified{}}
	for _, u := range c.Users {
		b.users[u.Name] = u.Hash
	}
	b.dummy = dummyOf(c.Users)
	_, _ = rand.Read(b.secret[:])
	return b
}

// dummyOf is the hash an unknown user is compared with: one of users'
// hashes at their median cost (the upper median of an even count), nil
// for no users. Then an unknown user costs what a wrong password of a
// typical user does. Against the highest cost, one hash of cost 14 among
// cost-10 ones would make every unknown-user guess 16 times dearer than
// a known user's; with mixed costs some timing difference remains either
// way: a user whose hash has another cost than the median answers faster
// or slower than an unknown one (README "Edge authentication").
func dummyOf(users []credfile.User) []byte {
	if len(users) == 0 {
		return nil
	}
	costs := make([]int, len(users))
	for i, u := range users {
		costs[i], _ = bcrypt.Cost(u.Hash)
	}
	median := slices.Clone(costs)
	slices.Sort(median)
	m := median[len(median)/2]
	return users[slices.Index(costs, m)].Hash
}

// parseBasic returns the user and password of an Authorization field value
// of the Basic scheme (RFC 7617 §2; the scheme case-insensitive, RFC 9110
// §11.1); ok false when it is not one.
func parseBasic(v string) (user, password string, ok bool) {
	scheme, token, found := strings.Cut(trimOWS(v), " ")
	if !found || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimLeft(token, " "))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(raw), ":")
}

// check is the verdict on h at now: ResultMissing without an Authorization
// field, ResultDenied for another scheme, malformed credentials, an
// unknown user or a wrong password, else ResultOK and the user; a
// verification not in the cache may also end as ResultBusy (every bcrypt
// slot taken: nothing compared) or ResultCanceled (ctx ended first).
func (b *basic) check(ctx context.Context, h http.Header, now time.Time) (result, subject string) {
	v := h["Authorization"]
	switch {
	case len(v) == 0:
		return ResultMissing, ""
	case len(v) > 1:
		return ResultDenied, ""
	}
	user, password, ok := parseBasic(v[0])
	if ok {
		// The users_file's names are NFC (credfile.UserName); so is the
		// user-id a client sends under charset="UTF-8" (RFC 7617 §2.1),
		// but a client may not have normalized it.
		user, ok = credfile.UserName(user)
	}
	if !ok {
		return ResultDenied, ""
	}
	key := b.cacheKey(user, password)
	if b.cached(key, now) {
		return ResultOK, user
	}
	hash, known := b.users[user]
	if !known {
		hash = b.dummy
		if hash == nil {
			hash = dummyHash()
		}
	}
	res := compare(ctx, hash, password)
	if res == ResultOK && !known {
		res = ResultDenied
	}
	if res != ResultOK {
		return res, ""
	}
	b.remember(key, user, now)
	return ResultOK, user
}

func (b *basic) cacheKey(user, password string) [sha256.Size]byte {
	m := hmac.New(sha256.New, b.secret[:])
	m.Write([]byte(user))
	m.Write([]byte{':'})
	m.Write([]byte(password))
	var k [sha256.Size]byte
	m.Sum(k[:0])
	return k
}

func (b *basic) cached(key [sha256.Size]byte, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.verified[key]
	if ok && now.After(v.expires) {
		delete(b.verified, key)
		return false
	}
	return ok
}

// remember caches a verification; when the cache is full, expired entries
// go first, then arbitrary ones (Go's map order) until there is room.
func (b *basic) remember(key [sha256.Size]byte, user string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.verified) >= VerifiedMax {
		for k, v := range b.verified {
			if now.After(v.expires) {
				delete(b.verified, k)
			}
		}
		for k := range b.verified {
			if len(b.verified) < VerifiedMax {
				break
			}
			delete(b.verified, k)
		}
	}
	b.verified[key] = verified{user, now.Add(VerifiedTTL)}
}
