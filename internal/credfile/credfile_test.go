package credfile

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

func TestParseKeys(t *testing.T) {
	keys, err := ParseKeys([]byte("\uFEFF# keys\n\nci:key-0123456789abcdef\r\n  key-fedcba9876543210  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].Name != "ci" || keys[0].Digest != sha256.Sum256([]byte("key-0123456789abcdef")) || keys[1].Name != "" {
		t.Fatalf("keys = %v", keys)
	}
	if s := keys[0].String(); strings.Contains(s, "key-") && s != "key ci" {
		t.Errorf("String() = %q", s)
	}
	for data, want := range map[string]string{
		"short\n":                       "line 1: a key must be 16 to 512 bytes long",
		"a:" + strings.Repeat("k", 513): "line 1: a key must be 16 to 512 bytes long",
		"key-0123456789abcdef\nkey-0123456789abcdef":     "line 2: the same key as line 1",
		"a:key-0123456789abcdef\na:key-0123456789abcdeX": `line 2: the name "a" is already used at line 1`,
		":key-0123456789abcdef":                          "line 1: the name before",
		"a:key-0123456789 abcdef":                        "line 1: a key must be visible ASCII",
		"a:key-0123456789:abcdef":                        "line 1: a key must be visible ASCII",
	} {
		_, err := ParseKeys([]byte(data))
		var le *LineError
		if !errors.As(err, &le) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v, want %q", data, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "0123456789") {
			t.Errorf("%q: the error quotes the key: %v", data, err)
		}
	}
	if keys, err := ParseKeys(nil); err != nil || len(keys) != 0 {
		t.Errorf("empty: %v %v", keys, err)
	}
	if _, err := ParseKeys(make([]byte, MaxFileBytes+1)); err == nil {
		t.Error("a file over MaxFileBytes parsed")
	}
}

func TestParseUsers(t *testing.T) {
	h, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	y := "$2y$" + string(h[4:]) // htpasswd -B
	users, err := ParseUsers([]byte("alice:" + string(h) + "\nbob:" + y + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(users) != 2 || users[0].Name != "alice" || string(users[1].Hash) != y {
		t.Fatalf("users = %v", users)
	}
	if _, err := ParseUsers([]byte("alice:" + withCost(h, MaxBcryptCost))); err != nil {
		t.Errorf("cost %d refused: %v", MaxBcryptCost, err)
	}
	// RFC 7617 §2.1: UTF-8 user-ids, kept in NFC.
	users8, err := ParseUsers([]byte("Jose\u0301:" + string(h) + "\n\u738b\u5c0f\u660e:" + y + "\n"))
	if err != nil || len(users8) != 2 || users8[0].Name != "Jos\u00e9" || users8[1].Name != "\u738b\u5c0f\u660e" {
		t.Errorf("UTF-8 users: %v %v", users8, err)
	}
	if s := users[0].String(); s != "user alice" {
		t.Errorf("String() = %q", s)
	}
	for data, want := range map[string]string{
		"alice\n":               "line 1: not USER:HASH",
		"alice:pw\n":            `line 1: user "alice": not a bcrypt hash`,
		"alice:$apr1$x$y\n":     `line 1: user "alice": not a bcrypt hash`,
		"alice:{SHA}abc=\n":     `line 1: user "alice": not a bcrypt hash`,
		":" + string(h):         "line 1: the user must be",
		"al ice:" + string(h):   "line 1: the user must be",
		"a\u200bb:" + string(h): "line 1: the user must be",
		"\xff:" + string(h):     "line 1: the user must be",
		strings.Repeat("\u00e9", 65) + ":" + string(h): "line 1: the user must be",
		"alice:" + string(h) + "\nalice:" + y:          `line 2: user "alice" is already defined at line 1`,
		"# c\nalice:" + withCost(h, 31):                `line 2: user "alice": bcrypt cost 31 is over the maximum of 14 (about 1 s of CPU per check`,
		"alice:" + withCost(h, 15):                     `line 1: user "alice": bcrypt cost 15 is over the maximum of 14`,
	} {
		_, err := ParseUsers([]byte(data))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v, want %q", data, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "$2") || strings.Contains(err.Error(), "pw")) {
			t.Errorf("%q: the error quotes a hash or password: %v", data, err)
		}
	}
}

// withCost is the bcrypt hash h with its cost field replaced by cost (a
// hash no password matches, but whose cost bcrypt.Cost reads): costs a
// test cannot afford to compute.
func withCost(h []byte, cost int) string {
	return fmt.Sprintf("%s%02d%s", h[:4], cost, h[6:])
}
