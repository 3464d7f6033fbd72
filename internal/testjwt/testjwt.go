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
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// Clock is a settable clock for tests of expiry and refresh: Now is what
// a JWTConfig's Now calls.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock is a Clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// JWKSServer serves a key set over HTTPS (httptest.NewTLSServer, a
// certificate for 127.0.0.1) at /jwks.json: a document the test changes,
// an outage it switches on and off, and a count of the fetches.
type JWKSServer struct {
	srv          *httptest.Server
	mu           sync.Mutex
	doc          []byte
	down         bool
	cacheControl string
	fetches      atomic.Int64
}

// NewJWKSServer serves doc until the test ends.
func NewJWKSServer(t testing.TB, doc []byte) *JWKSServer {
	s := &JWKSServer{doc: doc}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes refused by tests that distrust it
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *JWKSServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/jwks.json" {
		http.NotFound(w, r)
		return
	}
	s.fetches.Add(1)
	s.mu.Lock()
	doc, down, cc := s.doc, s.down, s.cacheControl
	s.mu.Unlock()
	if down {
		http.Error(w, "down for the test", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/jwk-set+json")
	if cc != "" {
		w.Header().Set("Cache-Control", cc)
	}
	w.Write(doc)
}

// URL is the set's https URL.
func (s *JWKSServer) URL() string { return s.srv.URL + "/jwks.json" }

// Pool holds the server's certificate, for a client that trusts it.
func (s *JWKSServer) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(s.srv.Certificate())
	return p
}

// CertPEM is the server's certificate in PEM, for a jwks_ca_file.
func (s *JWKSServer) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
}

// Set replaces the document served.
func (s *JWKSServer) Set(doc []byte) {
	s.mu.Lock()
	s.doc = doc
	s.mu.Unlock()
}

// SetDown makes the server answer 503 (true) or the document (false).
func (s *JWKSServer) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// SetCacheControl sets the Cache-Control of the answers ("" none).
func (s *JWKSServer) SetCacheControl(v string) {
	s.mu.Lock()
	s.cacheControl = v
	s.mu.Unlock()
}

// Fetches is the number of requests for the set so far.
func (s *JWKSServer) Fetches() int64 { return s.fetches.Load() }

// Claims are the claims of a token valid at now for 10 minutes, from
// issuer iss to audience aud, for subject sub.
func Claims(now time.Time, iss, aud, sub string) map[string]any {
	return map[string]any{"iss": iss, "aud": aud, "sub": sub, "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(10 * time.Minute).Unix()}
}

// JWKPrivateJSON is s's private key as a JWK (with "d"): what a key set
// must never hold.
func (s *Signer) JWKPrivateJSON() (string, error) {
	b, err := json.Marshal(jose.JSONWebKey{Key: s.Private, KeyID: s.Kid, Algorithm: s.Alg, Use: "sig"})
	return string(b), err
}
