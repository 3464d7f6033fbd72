package hcl

import "testing"

// TestListenerTLS: the tls block's certificate blocks and client
// certificate settings reach the Config with their source ranges.
func TestListenerTLS(t *testing.T) {
	cfg, diags := Load([]string{"testdata/good/listener_tls.hcl"})
	if diags.HasErrors() {
		t.Fatal(linesOf(diags))
	}
	m := cfg.Listeners[0].TLS
	if m.ClientAuth != "require" || m.ClientCAFile != "testdata/certs/ca.pem" || !m.ForwardClientCert || len(m.Certificates) != 2 {
		t.Fatalf("mtls tls = %+v", m)
	}
	c := m.Certificates[1]
	if c.CertFile != "testdata/certs/wildcard.pem" || c.KeyFile != "testdata/certs/wildcard-key.pem" ||
		c.Range.Start.Line != 15 || c.CertFileRange.Start.Line != 16 || c.KeyFileRange.Start.Line != 17 || m.ClientCAFileRange.Start.Line != 9 {
		t.Errorf("certificate = %+v, client_ca_file at %v", c, m.ClientCAFileRange)
	}
	if u := cfg.Listeners[1].TLS; u.ClientAuth != DefaultClientAuth || u.Certificates != nil {
		t.Errorf("defaults: %+v", u)
	}
}
