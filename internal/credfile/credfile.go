// Package credfile parses the credential files of edge authentication:
// an api_keys block's keys_file and a basic_auth block's users_file. The
// hcl package reads them at every load (validate, startup, reload) and the
// gateway gets the parsed values; neither the files' bytes nor an error
// ever carries a key, a password or a hash (errors name a line, never
// quote it).
package credfile

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/text/unicode/norm"
)

// MaxFileBytes bounds a credential file: 4 MiB, tens of thousands of keys
// or users. A larger file is an error rather than a slow load.
const MaxFileBytes = 4 << 20

// Key lengths, in bytes: a key shorter than MinKeyBytes is guessable, one
// longer than MaxKeyBytes no client sends.
const (
	MinKeyBytes = 16
	MaxKeyBytes = 512
)

// MaxBcryptCost is the highest bcrypt cost a users_file may hold: 14,
// about a second of a core per check (each step doubles it: cost 10 is
// 50-80 ms). Every wrong password, and every unknown user (compared with
// a hash of the file), costs one check; at cost 31 one request would pin
// a core for days and hold a shutdown past its drain_timeout.
const MaxBcryptCost = 14

// Key is one API key of a keys_file: the name it is logged as (Name, ""
// for an unnamed key) and the SHA-256 digest of the key (the key itself is
// not kept).
type Key struct {
	Name   string
	Digest [sha256.Size]byte
}

// String implements fmt.Stringer without the digest.
func (k Key) String() string { return "key " + k.Name }

// User is one user of a users_file: the name (RFC 7617 user-id) and its
// bcrypt hash.
type User struct {
	Name string
	Hash []byte
}

// String implements fmt.Stringer without the hash.
func (u User) String() string { return "user " + u.Name }

// LineError is a problem at one line of a credential file (1-based).
// Reason never quotes the line.
type LineError struct {
	Line   int
	Reason string
}

// Error implements error: "line N: REASON".
func (e *LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

// lines calls f with each line of data that is not blank or a comment
// ("#" first), trimmed of surrounding ASCII whitespace, and its number.
func lines(data []byte, f func(n int, line string) error) error {
	if len(data) > MaxFileBytes {
		return fmt.Errorf("larger than %d bytes", MaxFileBytes)
	}
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.Trim(l, " \t\r")
		if l == "" || l[0] == '#' {
			continue
		}
		if err := f(i+1, l); err != nil {
			return err
		}
	}
	return nil
}

// UserName returns the Basic user-id s normalized to NFC, as RFC 7617
// §2.1 asks of a UTF-8 user-id (the challenge's charset="UTF-8"), and
// whether it is one this package accepts: valid UTF-8, 1 to 64 characters,
// no ":" (RFC 7617 §2), no white space, control or format characters (a
// user-id reaches the access log's auth_subject field).
func UserName(s string) (string, bool) {
	if !utf8.ValidString(s) {
		return "", false
	}
	s = norm.NFC.String(s)
	n := 0
	for _, r := range s {
		n++
		if r == ':' || r == utf8.RuneError || unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return "", false
		}
	}
	return s, n >= 1 && n <= 64
}

// validName reports whether s can name a key or a user: 1 to 64 bytes of
// visible ASCII without ':' (the separator).
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f || s[i] == ':' {
			return false
		}
	}
	return true
}

// ParseKeys parses a keys_file: one key per line, "KEY" or "NAME:KEY";
// blank lines and lines starting with "#" are skipped. NAME (1 to 64
// visible ASCII bytes, no ":") is what the access log shows for a request
// the key let in. KEY is MinKeyBytes to MaxKeyBytes of visible ASCII
// without ":" (what an HTTP field carries unchanged, RFC 9110 §5.5).
// Errors are *LineError (a bad line, a duplicate key or name) or a file
// over MaxFileBytes. An empty file is valid: it admits nobody.
func ParseKeys(data []byte) ([]Key, error) {
	var keys []Key
	seen := map[[sha256.Size]byte]int{}
	names := map[string]int{}
	err := lines(data, func(n int, l string) error {
		name, key, named := strings.Cut(l, ":")
		if !named {
			name, key = "", l
		} else if !validName(name) {
			return &LineError{n, "the name before \":\" must be 1 to 64 visible ASCII characters"}
		}
		if len(key) < MinKeyBytes || len(key) > MaxKeyBytes {
			return &LineError{n, fmt.Sprintf("a key must be %d to %d bytes long", MinKeyBytes, MaxKeyBytes)}
		}
		for i := 0; i < len(key); i++ {
			if c := key[i]; c <= ' ' || c >= 0x7f || c == ':' {
				return &LineError{n, "a key must be visible ASCII without spaces or \":\""}
			}
		}
		d := sha256.Sum256([]byte(key))
		if prev, dup := seen[d]; dup {
			return &LineError{n, fmt.Sprintf("the same key as line %d", prev)}
		}
		if prev, dup := names[name]; dup && name != "" {
			return &LineError{n, fmt.Sprintf("the name %q is already used at line %d", name, prev)}
		}
		seen[d], names[name] = n, n
		keys = append(keys, Key{Name: name, Digest: d})
		return nil
	})
	return keys, err
}

// ParseUsers parses a users_file: "USER:HASH" lines, HASH a bcrypt hash
// ("$2a$", "$2b$" or "$2y$", as `htpasswd -B` writes); blank lines and
// lines starting with "#" are skipped. USER is 1 to 64 visible ASCII bytes
// without ":" (RFC 7617 §2: a user-id cannot hold a colon), or as UserName
// takes UTF-8 (RFC 7617 §2.1), normalized to NFC. Other hash
// schemes (MD5 "$apr1$", SHA-1 "{SHA}", crypt, plain text) are refused:
// bcrypt only, at a cost of at most MaxBcryptCost. Errors are *LineError or a file over MaxFileBytes. An
// empty file is valid: it admits nobody.
func ParseUsers(data []byte) ([]User, error) {
	var users []User
	seen := map[string]int{}
	err := lines(data, func(n int, l string) error {
		name, hash, ok := strings.Cut(l, ":")
		if !ok {
			return &LineError{n, "not USER:HASH"}
		}
		name, ok = UserName(name)
		if !ok {
			return &LineError{n, "the user must be 1 to 64 characters of UTF-8 without \":\", spaces or control characters"}
		}
		if prev, dup := seen[name]; dup {
			return &LineError{n, fmt.Sprintf("user %q is already defined at line %d", name, prev)}
		}
		cost, err := bcrypt.Cost([]byte(hash))
		if err != nil || !strings.HasPrefix(hash, "$2") {
			return &LineError{n, fmt.Sprintf("user %q: not a bcrypt hash (only bcrypt is accepted: htpasswd -B)", name)}
		}
		if cost > MaxBcryptCost {
			return &LineError{n, fmt.Sprintf("user %q: bcrypt cost %d is over the maximum of %d (about 1 s of CPU per check at %d, doubling with each step; every wrong password pays it): rehash with htpasswd -B -C %d or lower", name, cost, MaxBcryptCost, MaxBcryptCost, MaxBcryptCost)}
		}
		seen[name] = n
		users = append(users, User{Name: name, Hash: []byte(hash)})
		return nil
	})
	return users, err
}
