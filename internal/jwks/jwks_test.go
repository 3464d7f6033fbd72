package jwks

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/impulse-agent/impulse-agent/internal/testjwt"
)

func jwkJSON(t *testing.T, k jose.JSONWebKey) string {
	t.Helper()
	b, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func setOf(keys ...string) []byte { return []byte(`{"keys":[` + strings.Join(keys, ",") + `]}`) }

// TestCheckAlgorithm: the asymmetric algorithms pass; none (any case),
// HMAC and unknown names are refused, each with its reason.
func TestCheckAlgorithm(t *testing.T) {
	for _, alg := range Algorithms {
		if why := CheckAlgorithm(alg); why != "" {
			t.Errorf("%s refused: %s", alg, why)
		}
	}
	for alg, want := range map[string]string{
		"none": "never accepted", "None": "never accepted", "HS256": "HMAC", "hs512": "HMAC",
		"es256": "not a supported algorithm", "RS1": "not a supported algorithm", "": "not a supported algorithm",
	} {
		if why := CheckAlgorithm(alg); !strings.Contains(why, want) {
			t.Errorf("%q: %q, want %q", alg, why, want)
		}
	}
}

// TestParse: usable keys are kept and found by kid and algorithm; keys
// no configured algorithm fits, of another use or alg, unknown types and
// short RSA keys are skipped with their reason; secret material refuses
// the whole set; malformed documents are errors that quote no key.
func TestParse(t *testing.T) {
	es, rs := testjwt.ES256("e1"), testjwt.RS256("r1")
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	ed, _, _ := ed25519.GenerateKey(rand.Reader)
	short, _ := rsa.GenerateKey(rand.Reader, 1024)
	enc := es.JWK()
	enc.KeyID, enc.Use = "enc", "enc"
	other := es.JWK()
	other.KeyID, other.Algorithm = "ps", "PS256"
	doc := setOf(jwkJSON(t, es.JWK()), jwkJSON(t, rs.JWK()),
		jwkJSON(t, jose.JSONWebKey{Key: &p384.PublicKey, KeyID: "p384"}),
		jwkJSON(t, jose.JSONWebKey{Key: ed, KeyID: "ed"}),
		jwkJSON(t, jose.JSONWebKey{Key: &short.PublicKey, KeyID: "short"}),
		jwkJSON(t, enc), jwkJSON(t, other),
		`{"kty":"XYZ","kid":"odd"}`, `{"kty":"EC","kid":"bad","crv":"P-256","x":"AA","y":"AA"}`)
	s, err := Parse(doc, DefaultAlgorithms)
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 2 || !s.Has("e1", "ES256") || !s.Has("r1", "RS256") || s.Has("e1", "RS256") || s.Has("r1", "ES256") || s.Has("x", "ES256") {
		t.Errorf("keys: %d, %v", s.Len(), s.keys)
	}
	want := []string{`key 3 (kid "p384"): fits none`, `key 4 (kid "ed"): fits none`, `key 5 (kid "short"): an RSA key of 1024 bits`,
		`key 6 (kid "enc"): its use is "enc"`, `key 7 (kid "ps"): its alg "PS256" is not among`, `key 8 (kid "odd"): key type "XYZ" is not supported`,
		`key 9 (kid "bad"): malformed`}
	if len(s.Skipped) != len(want) {
		t.Fatalf("skipped %q", s.Skipped)
	}
	for i, w := range want {
		if !strings.HasPrefix(s.Skipped[i], w) {
			t.Errorf("skipped[%d] = %q, want %q...", i, s.Skipped[i], w)
		}
	}
	// With every algorithm, the P-384 and Ed25519 keys fit.
	all, err := Parse(doc, Algorithms)
	if err != nil || !all.Has("p384", "ES384") || !all.Has("ed", "EdDSA") || all.Has("p384", "ES256") || all.Has("r1", "PS256") {
		t.Errorf("all algorithms: %v %v", all, err)
	}
	// Without kid: the only key fitting the algorithm, never one of several.
	if !s.Has("", "ES256") || !s.Has("", "RS256") {
		t.Error("no kid, one fitting key: not found")
	}
	two, _ := Parse(setOf(jwkJSON(t, es.JWK()), jwkJSON(t, testjwt.ES256("e2").JWK())), DefaultAlgorithms)
	if two.Has("", "ES256") || !two.Has("e2", "ES256") {
		t.Error("no kid, two fitting keys: one was tried")
	}
	// The same document digests the same.
	again, _ := Parse(doc, DefaultAlgorithms)
	if again.Digest != s.Digest {
		t.Error("digest differs for the same document")
	}

	priv, _ := json.Marshal(jose.JSONWebKey{Key: es.Private, KeyID: "leak"})
	for name, tc := range map[string]struct {
		doc  []byte
		want string
	}{
		"private":    {setOf(string(priv)), `key 1 (kid "leak"): holds private key material`},
		"oct":        {setOf(`{"kty":"oct","kid":"h","k":"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"}`), `holds a symmetric key`},
		"not json":   {[]byte(`{"keys":`), "not a JWK Set"},
		"no keys":    {[]byte(`{"issuer":"x"}`), `no "keys" array`},
		"keys null":  {[]byte(`{"keys":null}`), `no "keys" array`},
		"keys obj":   {[]byte(`{"keys":{}}`), "not a JWK Set"},
		"dup member": {[]byte(`{"keys":[],"keys":[]}`), "not a JWK Set"},
		"none fit":   {setOf(jwkJSON(t, jose.JSONWebKey{Key: ed, KeyID: "ed"})), "no key usable with the configured algorithms (ES256, RS256): key 1"},
		"too big":    {append(setOf(), make([]byte, MaxBytes)...), "over 1048576 bytes"},
		"too many":   {setOf(strings.Repeat(`{"kty":"XYZ"},`, MaxKeys) + `{"kty":"XYZ"}`), "101 keys, over the maximum of 100"},
	} {
		_, err := Parse(tc.doc, DefaultAlgorithms)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "c2VjcmV0") || name == "private" && strings.Contains(err.Error(), string(priv[20:40]))) {
			t.Errorf("%s: the error quotes key material: %v", name, err)
		}
	}
	if _, err := Parse(setOf(jwkJSON(t, jose.JSONWebKey{Key: ed, KeyID: "ed"})), DefaultAlgorithms); !errors.Is(err, ErrNoUsableKey) {
		t.Errorf("none usable: %v does not wrap ErrNoUsableKey", err)
	}
	if s, err := Parse([]byte(`{"keys":[]}`), DefaultAlgorithms); err != nil || s.Len() != 0 {
		t.Errorf("empty set: %v %v", s, err)
	}
}

// TestParseBOM: a leading UTF-8 byte order mark is not part of the
// document (RFC 8259 §8.1); one elsewhere is still an error.
func TestParseBOM(t *testing.T) {
	doc := setOf(jwkJSON(t, testjwt.ES256("e1").JWK()))
	s, err := Parse(append([]byte("\xEF\xBB\xBF"), doc...), DefaultAlgorithms)
	if err != nil || s.Len() != 1 || !s.Has("e1", "ES256") {
		t.Fatalf("with a BOM: %v, %v", s, err)
	}
	if plain, _ := Parse(doc, DefaultAlgorithms); plain.Digest != s.Digest {
		t.Error("the BOM changes the set's digest")
	}
	if _, err := Parse(append([]byte(" \xEF\xBB\xBF"), doc...), DefaultAlgorithms); err == nil {
		t.Error("a BOM after a space was accepted")
	}
}
