// Package jwks parses the JSON Web Key Sets (RFC 7517 §5) a route's jwt
// block verifies tokens with, and names the signature algorithms it
// accepts. The hcl package parses a jwks_file with it at every load
// (validate, startup, reload) and the gateway a set fetched from a
// jwks_url; both get the same Set, holding public keys only.
//
// Keys are read with go-jose (jose.JSONWebKey). A key the set holds but
// no configured algorithm can use is skipped, as RFC 7517 §5 asks of keys
// "not understood", and named in Set.Skipped; a set holding secret key
// material (a private key, or a symmetric "oct" key) is refused whole: a
// JWKS is published, and one carrying secrets is a leak to stop at, not to
// work around.
package jwks

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/json"
)

// Bounds of a key set: a document over MaxBytes (1 MiB) or with more than
// MaxKeys (100) keys is refused. Identity providers publish a handful of
// keys (two or three around a rotation), a few KiB.
const (
	MaxBytes = 1 << 20
	MaxKeys  = 100
)

// MinRSABits is the smallest RSA modulus accepted, in bits: RFC 7518 §3.3
// ("a key of size 2048 bits or larger MUST be used").
const MinRSABits = 2048

// Algorithms are the JWS "alg" values a jwt block may list (RFC 7518 §3.1,
// RFC 8037 §3.1): the asymmetric ones. HMAC (HS256, HS384, HS512) is not
// among them: its key is a shared secret, and a set of public keys would
// make the public key the secret, which anyone can sign with (RFC 8725
// §2.1, §3.1); "none" never is (RFC 8725 §3.1).
var Algorithms = []string{"ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "EdDSA"}

// DefaultAlgorithms are a jwt block's algorithms when it names none: what
// most identity providers sign with (ES256, RS256).
var DefaultAlgorithms = []string{"ES256", "RS256"}

// CheckAlgorithm says why alg cannot be accepted ("" when it can): "none"
// and HMAC are refused with their reason, anything else not in Algorithms
// as unknown. The comparison is exact, as RFC 7515 §4.1.1 has it.
func CheckAlgorithm(alg string) string {
	switch {
	case slices.Contains(Algorithms, alg):
		return ""
	case strings.EqualFold(alg, "none"):
		return `"none" (an unsecured JWT, RFC 7519 §6) is never accepted (RFC 8725 §3.1)`
	case strings.HasPrefix(strings.ToUpper(alg), "HS"):
		return fmt.Sprintf("%q is HMAC, a shared secret: keys come from a JWKS of public keys, and a token signed with a public key as the secret would pass (RFC 8725 §2.1, §3.1)", alg)
	}
	for _, a := range Algorithms {
		if strings.EqualFold(a, alg) {
			return fmt.Sprintf("%q is not a supported algorithm: names are case-sensitive (RFC 7515 §4.1.1), write %q", alg, a)
		}
	}
	return fmt.Sprintf("%q is not a supported algorithm (%s)", alg, strings.Join(Algorithms, ", "))
}

// Key is one usable key of a set: its "kid" (ID, "" when the set gives
// none), its "alg" (Alg, "" when the key is not bound to one) and the
// public key (*ecdsa.PublicKey, *rsa.PublicKey or ed25519.PublicKey).
type Key struct {
	ID, Alg string
	Public  any
}

// Fits reports whether k can verify a signature of alg (one of
// Algorithms): the key type and curve the algorithm needs (RFC 7518
// §3.1), and the key's own "alg" when it has one (RFC 7517 §4.4).
func (k *Key) Fits(alg string) bool {
	if k.Alg != "" && k.Alg != alg {
		return false
	}
	switch p := k.Public.(type) {
	case *ecdsa.PublicKey:
		switch alg {
		case "ES256":
			return p.Curve == elliptic.P256()
		case "ES384":
			return p.Curve == elliptic.P384()
		case "ES512":
			return p.Curve == elliptic.P521()
		}
	case *rsa.PublicKey:
		return len(alg) == 5 && (alg[:2] == "RS" || alg[:2] == "PS")
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// Set is a parsed key set: the keys usable with the algorithms it was
// parsed for. Never modified once made; safe for concurrent use.
type Set struct {
	keys []Key
	// Digest is the SHA-256 of the document: two sets with the same digest
	// hold the same keys (a refresh that changed nothing).
	Digest [sha256.Size]byte
	// Skipped says, per key not kept, why ("key 2 (kid \"a\"): ..."), in
	// the document's order.
	Skipped []string
}

// Len is the number of usable keys.
func (s *Set) Len() int { return len(s.keys) }

// Candidates calls f with each key that may have signed a token with kid
// and alg, in the set's order, until f returns true. With a kid, those are
// the keys with that ID that fit alg; without one, the key fitting alg if
// the set holds exactly one (a token without "kid" is never tried against
// several keys: that would multiply the cost of a forged token by the size
// of the set).
func (s *Set) Candidates(kid, alg string, f func(*Key) bool) {
	if kid == "" {
		var only *Key
		for i := range s.keys {
			if s.keys[i].Fits(alg) {
				if only != nil {
					return
				}
				only = &s.keys[i]
			}
		}
		if only != nil {
			f(only)
		}
		return
	}
	for i := range s.keys {
		if k := &s.keys[i]; k.ID == kid && k.Fits(alg) && f(k) {
			return
		}
	}
}

// Has reports whether some key of s may have signed a token with kid and
// alg (Candidates would call f).
func (s *Set) Has(kid, alg string) bool {
	found := false
	s.Candidates(kid, alg, func(*Key) bool { found = true; return true })
	return found
}

// ErrNoUsableKey is wrapped by Parse's error for a set whose keys are all
// skipped.
var ErrNoUsableKey = errors.New("no key usable with the configured algorithms")

// Parse reads a JWK Set document (RFC 7517 §5) and keeps the public keys
// usable with one of algs (each one of Algorithms). A key is skipped, with
// its reason in Set.Skipped, when its type is unknown or malformed, its
// "use" is not "sig", its "alg" is not in algs, an RSA modulus is under
// MinRSABits, or no algorithm of algs fits it. Errors: a document over
// MaxBytes, not a JSON object with a "keys" array, over MaxKeys keys, a
// key holding secret material (private parameters or an "oct" key), and a
// set with keys of which none is usable (wrapping ErrNoUsableKey; an empty
// "keys" array is no error: the caller decides). No error quotes a key.
// A leading UTF-8 byte order mark (Windows editors write one) is ignored,
// as RFC 8259 §8.1 allows.
func Parse(data []byte, algs []string) (*Set, error) {
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("the key set is over %d bytes", MaxBytes)
	}
	data = bytes.TrimPrefix(data, []byte("\xEF\xBB\xBF"))
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not a JWK Set (RFC 7517 §5): %s", jsonReason(err))
	}
	if doc.Keys == nil {
		return nil, errors.New(`not a JWK Set (RFC 7517 §5): no "keys" array`)
	}
	if len(doc.Keys) > MaxKeys {
		return nil, fmt.Errorf("%d keys, over the maximum of %d", len(doc.Keys), MaxKeys)
	}
	s := &Set{Digest: sha256.Sum256(data)}
	for i, raw := range doc.Keys {
		k, why, err := parseKey(raw, algs)
		name := fmt.Sprintf("key %d", i+1)
		if k.ID != "" {
			name += fmt.Sprintf(" (kid %q)", k.ID)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		if why != "" {
			s.Skipped = append(s.Skipped, name+": "+why)
			continue
		}
		s.keys = append(s.keys, k)
	}
	if len(s.keys) == 0 && len(doc.Keys) > 0 {
		return nil, fmt.Errorf("%w (%s): %s", ErrNoUsableKey, strings.Join(algs, ", "), strings.Join(s.Skipped, "; "))
	}
	return s, nil
}

// parseKey reads one JWK: the usable key, or why it is skipped, or an
// error for secret material.
func parseKey(raw []byte, algs []string) (Key, string, error) {
	var hdr struct {
		Kid string `json:"kid"`
		Kty string `json:"kty"`
		D   any    `json:"d"`
		K   any    `json:"k"`
	}
	if err := json.Unmarshal(raw, &hdr); err != nil {
		return Key{}, "not a JSON object", nil
	}
	k := Key{ID: hdr.Kid}
	switch {
	case hdr.D != nil:
		return k, "", errors.New(`holds private key material ("d"): a JWKS publishes public keys only`)
	case hdr.Kty == "oct" || hdr.K != nil:
		return k, "", errors.New(`holds a symmetric key ("oct"): a secret, never published, and HMAC is not accepted`)
	}
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON(raw); err != nil {
		if errors.Is(err, jose.ErrUnsupportedKeyType) {
			return k, fmt.Sprintf("key type %q is not supported", hdr.Kty), nil
		}
		return k, "malformed: " + strings.TrimPrefix(err.Error(), "go-jose/go-jose: "), nil
	}
	if !jwk.IsPublic() {
		return k, "", errors.New("holds secret key material: a JWKS publishes public keys only")
	}
	k.Alg, k.Public = jwk.Algorithm, jwk.Key
	switch {
	case jwk.Use != "" && jwk.Use != "sig":
		return k, fmt.Sprintf("its use is %q, not \"sig\"", jwk.Use), nil
	case k.Alg != "" && !slices.Contains(algs, k.Alg):
		return k, fmt.Sprintf("its alg %q is not among the configured algorithms", k.Alg), nil
	}
	if p, ok := k.Public.(*rsa.PublicKey); ok && p.N.BitLen() < MinRSABits {
		return k, fmt.Sprintf("an RSA key of %d bits, under %d (RFC 7518 §3.3)", p.N.BitLen(), MinRSABits), nil
	}
	for _, alg := range algs {
		if k.Fits(alg) {
			return k, "", nil
		}
	}
	return k, "fits none of the configured algorithms", nil
}

// jsonReason is err without the decoder's package prefix.
func jsonReason(err error) string {
	return strings.TrimPrefix(err.Error(), "json: ")
}
