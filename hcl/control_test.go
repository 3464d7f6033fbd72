package hcl

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestControlSafeDefaults: a control API reachable from other hosts needs
// token_file or allow_unauthenticated = true; the error points at
// control.address (issue 9, point 5).
func TestControlSafeDefaults(t *testing.T) {
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr, extra string
		refused     bool
	}{
		{"127.0.0.1:9901", "", false},
		{"127.0.0.2:0", "", false},
		{"localhost:9901", "", false},
		{"[::1]:9901", "", false},
		{"0.0.0.0:9901", "", true},
		{":9901", "", true},
		{"[::]:9901", "", true},
		{"10.1.2.3:9901", "", true},
		{"gateway.internal:9901", "", true},
		{"0.0.0.0:9901", fmt.Sprintf("token_file = %q", token), false},
		{"10.1.2.3:9901", "allow_unauthenticated = true", false},
		{"10.1.2.3:9901", "allow_unauthenticated = false", true},
	} {
		src := fmt.Sprintf("control {\n  address = %q\n  %s\n}\n", tc.addr, tc.extra)
		_, diags := Parse("c.hcl", []byte(src))
		got := linesOf(diags)
		if !tc.refused {
			// Only the control block's own lines count: a file without
			// a listener may be an error of its own.
			if strings.Contains(got, "c.hcl:2:") || strings.Contains(got, "c.hcl:3:") {
				t.Errorf("%s %s: unexpected errors:\n%s", tc.addr, tc.extra, got)
			}
			continue
		}
		want := "c.hcl:2:13: Unauthenticated control API: control address: " + fmt.Sprintf("%q", tc.addr)
		if !diags.HasErrors() || !strings.Contains("\n"+got, "\n"+want) || !strings.Contains(got, "allow_unauthenticated") {
			t.Errorf("%s %s: got\n%s\nwant a line starting %s", tc.addr, tc.extra, got, want)
		}
	}
}

// TestRangesForTheAgent: the values the agent checks only when it binds or
// loads them carry their source ranges.
func TestRangesForTheAgent(t *testing.T) {
	src := fmt.Sprintf(`control {
  address    = "127.0.0.1:0"
}
listener "l" {
  address = "127.0.0.1:0"
  tls {
    cert_file = %[1]q
    key_file  = %[2]q
  }
}
upstream "u" {
  route {}
  backend "b" {
    address = "https://127.0.0.1:1"
  }
  tls {
    ca_file = %[1]q
  }
}
`, certDir+"/cert.pem", certDir+"/key.pem")
	cfg, diags := Parse("r.hcl", []byte(src))
	if diags.HasErrors() {
		t.Fatal(linesOf(diags))
	}
	pos := func(r interface{ String() string }) string { return r.String() }
	l := cfg.Listeners[0]
	for name, got := range map[string]string{
		"control address": pos(cfg.Control.AddressRange), "listener address": pos(l.AddressRange),
		"cert_file": pos(l.TLS.CertFileRange), "key_file": pos(l.TLS.KeyFileRange),
		"upstream ca_file": pos(cfg.Upstreams[0].TLS.CAFileRange),
	} {
		want := map[string]string{
			"control address": "r.hcl:2,16-29", "listener address": "r.hcl:5,13-26",
			"cert_file": "r.hcl:7,17-", "key_file": "r.hcl:8,17-", "upstream ca_file": "r.hcl:17,15-",
		}[name]
		if !strings.HasPrefix(got, want) {
			t.Errorf("%s range = %s, want %s...", name, got, want)
		}
	}
}

// TestParseToken: what a token_file may hold.
func TestParseToken(t *testing.T) {
	for in, want := range map[string]string{"abc\n": "abc", "\ufeffabc\r\n": "abc", "  a.b-c_~+/=  ": "a.b-c_~+/="} {
		if got, err := ParseToken([]byte(in)); err != nil || got != want {
			t.Errorf("ParseToken(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", " \n", "line1\nline2\n", "a b", "a\tb", "a\x00b", "abc\x7f", "abcé", "\u00a0s3cret\u3000\n"} {
		if got, err := ParseToken([]byte(in)); err == nil {
			t.Errorf("ParseToken(%q) = %q, want an error", in, got)
		}
	}
}
