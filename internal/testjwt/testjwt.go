// Package testjwt makes throw-away signing keys, key sets and tokens for
// tests of JWT authentication (case A05): valid ES256 and RS256 tokens,
// and the forged ones an attacker sends (alg "none", HS256 with the
// public key as the HMAC secret). It is imported only by tests.
package testjwt

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"sync"

	jose "github.com/go-jose/go-jose/v4"
)

// Signer is a private key with its kid and algorithm.
type Signer struct {
	Kid, Alg string
	Private  crypto.Signer
}

// rsaKey is one 2048-bit RSA key for every RS256 Signer of a test binary:
// generating one takes about a second of a shared core.
var rsaKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// ES256 is a new P-256 key named kid.
func ES256(kid string) *Signer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return &Signer{Kid: kid, Alg: "ES256", Private: k}
}

// RS256 is the test binary's RSA key (2048 bits) named kid.
func RS256(kid string) *Signer { return &Signer{Kid: kid, Alg: "RS256", Private: rsaKey()} }

// JWK is s's public key as a JWK (RFC 7517 §4) with kid, alg and use "sig".
func (s *Signer) JWK() jose.JSONWebKey {
	return jose.JSONWebKey{Key: s.Private.Public(), KeyID: s.Kid, Algorithm: s.Alg, Use: "sig"}
}

// JWKS is the JWK Set document of the signers' public keys.
func JWKS(signers ...*Signer) []byte {
	set := jose.JSONWebKeySet{}
	for _, s := range signers {
		set.Keys = append(set.Keys, s.JWK())
	}
	b, err := json.Marshal(set)
	if err != nil {
		panic(err)
	}
	return b
}

// Sign is a compact JWS of claims signed by s, with typ "JWT" and s's kid
// in its header.
func (s *Signer) Sign(claims map[string]any) string {
	return s.SignHeader(map[string]any{"kid": s.Kid}, claims)
}

// SignHeader is Sign with the header fields hdr ("alg" is s's; a kid only
// when hdr has one).
func (s *Signer) SignHeader(hdr map[string]any, claims map[string]any) string {
	opts := (&jose.SignerOptions{}).WithType("JWT")
	for k, v := range hdr {
		opts.WithHeader(jose.HeaderKey(k), v)
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.SignatureAlgorithm(s.Alg), Key: s.Private}, opts)
	if err != nil {
		panic(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		panic(err)
	}
	obj, err := sig.Sign(payload)
	if err != nil {
		panic(err)
	}
	out, err := obj.CompactSerialize()
	if err != nil {
		panic(err)
	}
	return out
}

// PublicPEM is s's public key in PEM (SubjectPublicKeyInfo): what an
// attacker takes as the HMAC secret of an HS256 token.
func (s *Signer) PublicPEM() []byte {
	der, err := x509.MarshalPKIXPublicKey(s.Private.Public())
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// HS256WithPublicKey is the algorithm-confusion forgery (RFC 8725 §2.1):
// claims signed with HMAC-SHA-256 keyed by s's public key (PEM), with s's
// kid, so that a verifier taking "alg" from the token and the key from
// the set would accept it.
func (s *Signer) HS256WithPublicKey(claims map[string]any) string {
	input := segment(map[string]any{"alg": "HS256", "typ": "JWT", "kid": s.Kid}) + "." + segment(claims)
	m := hmac.New(sha256.New, s.PublicPEM())
	m.Write([]byte(input))
	return input + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Unsigned is an unsecured JWT (alg "none", RFC 7519 §6) of claims, with
// kid, and an empty signature.
func Unsigned(kid string, claims map[string]any) string {
	return segment(map[string]any{"alg": "none", "typ": "JWT", "kid": kid}) + "." + segment(claims) + "."
}

// segment is v as JSON, base64url without padding.
func segment(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
