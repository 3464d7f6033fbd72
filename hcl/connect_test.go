package hcl

import (
	"strings"
	"testing"
)

// TestConnectBlock: the connect block (issue 23) parses with its default,
// says native = true is not yet supported, and refuses a missing, empty or
// non-SPIFFE service name at the value's file:line:column.
func TestConnectBlock(t *testing.T) {
	cases := []struct {
		name, block string
		want        *Connect
		err         string // the error line, "file:line:col: summary: detail" (a substring)
	}{
		{"absent", ``, nil, ""},
		{"service", "connect {\n  service = \"web\"\n}\n", &Connect{Service: "web"}, ""},
		{"native", "connect {\n  service = \"edge-1.v2_x\"\n  native  = true\n}\n", &Connect{Service: "edge-1.v2_x", Native: true}, ""},
		{"missing service", "connect {\n  native = true\n}\n", nil, "connect.hcl:1:1: Missing required argument: connect: the service of the mesh identity is required"},
		{"empty service", "connect {\n  service = \"\"\n}\n", nil, "connect.hcl:2:13: Invalid service name: connect service: must not be empty."},
		{"a slash", "connect {\n  service = \"web/admin\"\n}\n", nil, `connect.hcl:2:13: Invalid service name: connect service: "web/admin": byte '/' is not allowed`},
		{"a dot segment", "connect {\n  service = \"..\"\n}\n", nil, `connect.hcl:2:13: Invalid service name: connect service: ".." cannot name a service.`},
		{"too long", "connect {\n  service = \"" + strings.Repeat("a", 64) + "\"\n}\n", nil, "is longer than 63 bytes"},
		{"not a string", "connect {\n  service = [\"web\"]\n}\n", nil, "connect.hcl:2:13: "},
		{"native not a bool", "connect {\n  service = \"web\"\n  native = \"yes\"\n}\n", nil, "connect.hcl:3:12: Invalid value type: connect native"},
		{"two blocks", "connect {\n  service = \"web\"\n}\nconnect {\n  service = \"db\"\n}\n", nil, "connect.hcl:4:1: Duplicate connect block: connect: only one connect block is allowed here; the first is at connect.hcl:1:1."},
		{"unknown argument", "connect {\n  service = \"web\"\n  sidecar = true\n}\n", nil, "connect.hcl:3:3: Unsupported argument"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, diags := Parse("connect.hcl", []byte(c.block+tracingBase))
			var buf strings.Builder
			if err := WriteDiagnosticLines(&buf, diags); err != nil {
				t.Fatal(err)
			}
			if c.err != "" {
				if !diags.HasErrors() || !strings.Contains(buf.String(), c.err) {
					t.Fatalf("diagnostics\n%s\nwant a line with %q", buf.String(), c.err)
				}
				return
			}
			if diags.HasErrors() {
				t.Fatalf("diagnostics: %s", buf.String())
			}
			got := cfg.Connect
			if got != nil {
				if got.Range.Start.Line != 1 || got.ServiceRange.Start.Line != 2 {
					t.Fatalf("ranges %v %v", got.Range, got.ServiceRange)
				}
				g := *got
				g.Range, g.ServiceRange = c.want.Range, c.want.ServiceRange
				got = &g
			}
			if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
				t.Fatalf("connect %+v, want %+v", got, c.want)
			}
			warned := strings.Contains(buf.String(), "connect.hcl:3:13: warning: Not yet supported: connect: native = true")
			if warned != (c.want != nil && c.want.Native) {
				t.Fatalf("not-yet-supported warning %v, want %v:\n%s", warned, c.want != nil && c.want.Native, buf.String())
			}
		})
	}
}

// TestMeshListener: listener { connect = true } needs no tls block and
// takes the top-level connect block's identity; without that block, with
// a tls block, or with a non-bool value it is an error at file:line:column.
func TestMeshListener(t *testing.T) {
	const up = "upstream \"web\" {\n  route {}\n  backend \"a\" { address = \"http://127.0.0.1:8080\" }\n}\n"
	const ident = "connect {\n  service = \"web\"\n}\n"
	mesh := func(extra string) string {
		return "listener \"mesh\" {\n  address = \"127.0.0.1:21000\"\n  connect = true\n" + extra + "}\n"
	}
	cases := []struct {
		name, src string
		err       string
	}{
		{"ok", ident + mesh(""), ""},
		{"with protocols", ident + mesh("  protocols = [\"h1\", \"h2\", \"h3\"]\n"), ""},
		{"connect = false needs tls", ident + "listener \"mesh\" {\n  address = \"127.0.0.1:21000\"\n  connect = false\n}\n",
			"mesh.hcl:4:1: Missing TLS"},
		{"no connect block", mesh(""), "mesh.hcl:3:13: Missing connect block: listener \"mesh\" connect: connect = true makes this a service mesh listener"},
		{"a tls block", ident + mesh("  tls {\n    cert_file = \"testdata/certs/cert.pem\"\n    key_file = \"testdata/certs/key.pem\"\n  }\n"),
			"mesh.hcl:7:3: Conflicting blocks: listener \"mesh\" tls: a connect = true listener takes its TLS from the Connect leaf certificate"},
		{"early data", ident + mesh("  protocols = [\"h3\"]\n  early_data = true\n"), "mesh.hcl:8:16: Conflicting arguments: listener \"mesh\" early_data: a connect = true listener does not accept early data"},
		{"not a bool", ident + "listener \"mesh\" {\n  address = \"127.0.0.1:21000\"\n  connect = \"yes\"\n}\n", "mesh.hcl:6:13: Invalid value type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, diags := Parse("mesh.hcl", []byte(c.src+up))
			var buf strings.Builder
			if err := WriteDiagnosticLines(&buf, diags); err != nil {
				t.Fatal(err)
			}
			if c.err != "" {
				if !diags.HasErrors() || !strings.Contains(buf.String(), c.err) {
					t.Fatalf("diagnostics\n%s\nwant a line with %q", buf.String(), c.err)
				}
				return
			}
			if diags.HasErrors() {
				t.Fatalf("diagnostics: %s", buf.String())
			}
			l := cfg.Listeners[0]
			if !l.Connect || l.ConnectRange.Start.Line == 0 || l.TLS.CertFile != "" {
				t.Fatalf("listener %+v", l)
			}
		})
	}
}
