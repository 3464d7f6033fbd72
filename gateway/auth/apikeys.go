package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/textproto"

	"github.com/impulse-agent/impulse-agent/internal/credfile"
)

// apiKeys checks an API key in a request field (OWASP ASVS V2/V3: compared
// in constant time). The presented key is hashed with SHA-256 and its
// digest compared with every configured digest by
// crypto/subtle.ConstantTimeCompare, without stopping at a match: the time
// taken depends on neither the key's length nor which key (or whether one)
// matched, only on the number of keys (about 30 ns each).
type apiKeys struct {
	header string // canonical
	keys   []credfile.Key
}

func newAPIKeys(c APIKeysConfig) *apiKeys {
	return &apiKeys{header: textproto.CanonicalMIMEHeaderKey(c.Header), keys: c.Keys}
}

// check is the verdict on h: ResultMissing without the field (or with it
// empty; optional whitespace around the key is not part of it, RFC 9110
// §5.5), ResultDenied for a key that matches none (or the field sent more
// than once), else ResultOK and the key's name.
func (a *apiKeys) check(h http.Header) (result, subject string) {
	v := h[a.header]
	switch {
	case len(v) == 0 || len(v) == 1 && trimOWS(v[0]) == "":
		return ResultMissing, ""
	case len(v) > 1:
		return ResultDenied, ""
	}
	i := matchKey(a.keys, sha256.Sum256([]byte(trimOWS(v[0]))))
	if i < 0 {
		return ResultDenied, ""
	}
	return ResultOK, a.keys[i].Name
}

// matchKey is the index of the key whose digest is d, or -1; it compares
// d with every key, in constant time each, whatever matches.
func matchKey(keys []credfile.Key, d [sha256.Size]byte) int {
	found := -1
	for i := range keys {
		eq := subtle.ConstantTimeCompare(keys[i].Digest[:], d[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	return found
}
