package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

// TestHelpExitsZero: -h prints usage and exits 0 for the agent and every
// subcommand.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"validate", "-h"}, {"probe", "-h"}, {"version", "-h"}} {
		var out, errOut bytes.Buffer
		code := run(args, strings.NewReader(""), &out, &errOut)
		if code != 0 || !strings.Contains(strings.ToLower(errOut.String()), "usage") {
			t.Errorf("%q: exit %d, stderr %q; want 0 and the usage", args, code, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"version", "extra"}, nil, &out, &errOut); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}

// TestProbeVerboseShowsWhatIsSent: -v prints the request header section as
// quic-go sends it, content-length included, and the server agrees.
func TestProbeVerboseShowsWhatIsSent(t *testing.T) {
	ps := startProbeServer(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "cl=%q n=%d", r.Header.Values("Content-Length"), r.ContentLength)
	})
	file := filepath.Join(t.TempDir(), "body")
	os.WriteFile(file, []byte("0123456789"), 0o600)
	for _, tc := range []struct {
		args   []string
		wantCL string // "" = no content-length line
	}{
		{[]string{"-d", "hello"}, "5"},
		{[]string{"-d", "@" + file}, "10"},
		{[]string{"-X", "POST", "-d", ""}, "0"},
		{[]string{"-X", "POST"}, "0"},
		{[]string{}, ""},
		{[]string{"-X", "DELETE"}, ""},
	} {
		args := append([]string{"-v", "-cacert", ps.caFile, "-H", "Connection: close", "-H", "User-Agent:"}, tc.args...)
		code, out, errOut := probe(t, nil, append(args, ps.url)...)
		if code != 0 {
			t.Fatalf("%q: exit %d", tc.args, code)
		}
		m := regexp.MustCompile(`(?m)^> content-length: (\d+)$`).FindStringSubmatch(errOut)
		switch {
		case tc.wantCL == "" && m != nil, tc.wantCL != "" && (m == nil || m[1] != tc.wantCL):
			t.Errorf("%q: -v shows %v, want content-length %q", tc.args, m, tc.wantCL)
		}
		if tc.wantCL != "" && !strings.Contains(out, fmt.Sprintf(`cl=["%s"]`, tc.wantCL)) {
			t.Errorf("%q: the server got %s, want content-length %s", tc.args, out, tc.wantCL)
		}
		if strings.Contains(errOut, "> connection:") || strings.Contains(errOut, "> user-agent") {
			t.Errorf("%q: -v shows a field that is not sent:\n%s", tc.args, errOut)
		}
	}
}

// TestProbeDataDirectory: -d @DIR is a usage error.
func TestProbeDataDirectory(t *testing.T) {
	code, _, errOut := probe(t, nil, "-d", "@"+t.TempDir(), "https://127.0.0.1:1/")
	if code != 2 || !strings.Contains(errOut, "is a directory") {
		t.Fatalf("-d @DIR: exit %d %q, want 2 naming the directory", code, errOut)
	}
}

// jsonLines fails the test unless every line of s is a JSON object, and
// returns them.
func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("not a JSON line: %q", line)
			continue
		}
		out = append(out, m)
	}
	return out
}

// TestLogJSONStartFailures: with -log-json every line the agent writes
// before it serves is JSON: command-line errors, configuration
// diagnostics, and start failures such as a port in use.
func TestLogJSONStartFailures(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.hcl")
	os.WriteFile(bad, []byte("listener \"x\" {\n  address = 1\n}\nbogus = 2\n"), 0o600)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cert, _ := selfsigned.New("localhost")
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	os.WriteFile(certFile, cert.CertPEM, 0o600)
	os.WriteFile(keyFile, cert.KeyPEM, 0o600)
	inUse := filepath.Join(dir, "inuse.hcl")
	os.WriteFile(inUse, []byte(fmt.Sprintf("control {\n  address = %q\n}\nlistener \"l\" {\n  address = \"127.0.0.1:0\"\n  tls {\n    cert_file = %q\n    key_file = %q\n  }\n}\n",
		busy.Addr().String(), certFile, keyFile)), 0o600)
	for _, tc := range []struct {
		args []string
		code int
		want string // in some line's "diagnostic" or "error"
	}{
		{[]string{"-log-json", "-bogus"}, 2, "flag provided but not defined"},
		{[]string{"-log-json", "-dev", "-config=x"}, 2, "mutually exclusive"},
		{[]string{"-log-json", "-config=" + bad}, 1, "bad.hcl:2:"},
		{[]string{"-log-json=true", "-config=" + inUse}, 1, "inuse.hcl:2:13: Cannot bind control address"},
	} {
		var out, errOut bytes.Buffer
		code := run(tc.args, nil, &out, &errOut)
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d\n%s", tc.args, code, tc.code, errOut.String())
		}
		found := false
		for _, m := range jsonLines(t, errOut.String()+out.String()) {
			if strings.Contains(fmt.Sprint(m["diagnostic"]), tc.want) || strings.Contains(fmt.Sprint(m["error"]), tc.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%q: no JSON line with %q:\n%s", tc.args, tc.want, errOut.String())
		}
	}
}

func TestWantsJSON(t *testing.T) {
	for args, want := range map[string]bool{
		"-log-json": true, "--log-json": true, "-log-json=false": false, "-log-json=1": true,
		"-config=x": false, "-- -log-json": false, "-log-jsonx": false,
	} {
		if got := wantsJSON(strings.Fields(args)); got != want {
			t.Errorf("wantsJSON(%q) = %v, want %v", args, got, want)
		}
	}
}

// TestValidateRefusesOpenControl: validate reports a control API on a
// non-loopback address without token_file as the error the agent refuses
// to start with, at control.address.
func TestValidateRefusesOpenControl(t *testing.T) {
	dir := t.TempDir()
	cert, _ := selfsigned.New("localhost")
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	os.WriteFile(certFile, cert.CertPEM, 0o600)
	os.WriteFile(keyFile, cert.KeyPEM, 0o600)
	// A complete configuration but for the control block.
	rest := fmt.Sprintf("listener \"l\" {\n  address = \"127.0.0.1:0\"\n  tls {\n    cert_file = %q\n    key_file = %q\n  }\n}\n", certFile, keyFile) +
		"upstream \"u\" {\n  route {}\n  backend \"b\" {\n    address = \"http://127.0.0.1:1\"\n  }\n}\n"
	path := filepath.Join(dir, "open.hcl")
	os.WriteFile(path, []byte("control {\n  address = \"0.0.0.0:9901\"\n}\n"+rest), 0o600)
	var out, errOut bytes.Buffer
	if code := run([]string{"validate", "-config=" + path}, nil, &out, &errOut); code != 1 ||
		!strings.HasPrefix(errOut.String(), path+":2:13: Unauthenticated control API: control address: \"0.0.0.0:9901\"") {
		t.Fatalf("validate: exit %d\n%s", code, errOut.String())
	}
	os.WriteFile(path, []byte("control {\n  address = \"0.0.0.0:9901\"\n  allow_unauthenticated = true\n}\n"+rest), 0o600)
	out.Reset()
	errOut.Reset()
	if code := run([]string{"validate", "-config=" + path}, nil, &out, &errOut); code != 0 {
		t.Fatalf("validate with allow_unauthenticated: exit %d\n%s", code, errOut.String())
	}
}

// TestValidateAgreesWithStartOnDogStatsD: a dogstatsd_address whose host
// does not resolve is refused by validate with the diagnostic the agent
// refuses to start with (same file:line:column and text): what validate
// accepts, the agent loads.
func TestValidateAgreesWithStartOnDogStatsD(t *testing.T) {
	dir := t.TempDir()
	cert, _ := selfsigned.New("localhost")
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	os.WriteFile(certFile, cert.CertPEM, 0o600)
	os.WriteFile(keyFile, cert.KeyPEM, 0o600)
	path := filepath.Join(dir, "dogstatsd.hcl")
	os.WriteFile(path, []byte(fmt.Sprintf("control {\n  address = \"127.0.0.1:0\"\n}\ntelemetry {\n  dogstatsd_address = \"nonexistent.invalid:8125\"\n}\n"+
		"listener \"l\" {\n  address = \"127.0.0.1:0\"\n  tls {\n    cert_file = %q\n    key_file = %q\n  }\n}\n"+
		"upstream \"u\" {\n  route {}\n  backend \"b\" {\n    address = \"http://127.0.0.1:1\"\n  }\n}\n", certFile, keyFile)), 0o600)

	var out, errOut bytes.Buffer
	code := run([]string{"validate", "-config=" + path}, nil, &out, &errOut)
	diag := strings.TrimSpace(errOut.String())
	if code != 1 || !strings.HasPrefix(diag, path+":5:23: Cannot reach DogStatsD address: telemetry dogstatsd_address: ") ||
		!strings.Contains(diag, "nonexistent.invalid") || strings.Contains(diag, "\n") {
		t.Fatalf("validate: exit %d\n%s", code, diag)
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"-config=" + path}, nil, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), diag) {
		t.Fatalf("start: exit %d, want 1 with %q in:\n%s", code, diag, errOut.String())
	}
}
