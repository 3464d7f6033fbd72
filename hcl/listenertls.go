package hcl

import hcl2 "github.com/hashicorp/hcl/v2"

// clientAuthModes are the accepted listener tls client_auth values.
var clientAuthModes = []string{"none", "request", "require"}

// buildListenerTLS converts a listener's tls block: cert_file and key_file
// (required) load as a matching pair (LoadKeyPair); every certificate block
// does too and has a DNS SAN to be chosen by; client_auth is one of
// clientAuthModes; client_ca_file, required unless client_auth is "none",
// loads as a CA bundle (LoadCertPool). Settings that cannot take effect
// (a client_ca_file or forward_client_cert with client_auth = "none") warn.
func buildListenerTLS(tb blk, r *rawListenerTLS) ListenerTLS {
	t := ListenerTLS{
		CertFileRange: rangeOf(r.CertFile), KeyFileRange: rangeOf(r.KeyFile), ClientCAFileRange: rangeOf(r.ClientCAFile),
	}
	t.CertFile, t.KeyFile = tb.certKey(r.CertFile, r.KeyFile)
	for _, rc := range r.Certificates {
		cb := tb.child("certificate", rc.DefRange)
		c := Certificate{Range: rc.DefRange, CertFileRange: rangeOf(rc.CertFile), KeyFileRange: rangeOf(rc.KeyFile)}
		var leafOK bool
		c.CertFile, c.KeyFile, leafOK = cb.selectableCertKey(rc.CertFile, rc.KeyFile)
		if leafOK {
			t.Certificates = append(t.Certificates, c)
		}
	}

	before := tb.errCount()
	t.ClientAuth = tb.oneOf(r.ClientAuth, DefaultClientAuth, clientAuthModes...)
	authOK := tb.errCount() == before // cross-field checks never quote a default the user did not write
	var caOK bool
	t.ClientCAFile, caOK = tb.fileOK(r.ClientCAFile)
	if caOK {
		if _, err := LoadCertPool(t.ClientCAFile); err != nil {
			tb.tlsError(err, map[string]*hcl2.Attribute{"ca_file": r.ClientCAFile})
		}
	}
	t.ForwardClientCert = tb.boolean(r.ForwardClientCert, false)
	switch {
	case !authOK:
	case t.ClientAuth != "none" && t.ClientCAFile == "":
		tb.errorf(r.ClientAuth, "", "Missing client CA file",
			"client_auth = %q verifies client certificates against client_ca_file, a PEM bundle of the CAs that issue them; set it.", t.ClientAuth)
	case t.ClientAuth == "none" && r.ClientCAFile != nil && t.ClientCAFile != "":
		tb.add(hcl2.DiagWarning, tb.subject(r.ClientCAFile), "Client CA file not used",
			tb.field("client_ca_file")+": client_auth is \"none\", so no client certificate is asked for; set client_auth = \"request\" or \"require\" to use it.")
	}
	if authOK && t.ForwardClientCert && t.ClientAuth == "none" {
		tb.add(hcl2.DiagWarning, tb.subject(r.ForwardClientCert), "Nothing to forward",
			tb.field("forward_client_cert")+": client_auth is \"none\", so no client certificate is verified and X-Forwarded-Client-Cert is never sent (a client's own copy is still removed).")
	}
	return t
}

// certKeyLeaf converts a required cert_file and key_file pair and checks
// they load as a matching pair (keyPair); it returns their values and, when
// they load, what the checks need of the leaf certificate.
func (b blk) certKeyLeaf(certAttr, keyAttr *hcl2.Attribute) (certFile, keyFile string, leaf leafInfo) {
	var certOK, keyOK bool
	certFile, certOK = b.fileOK(certAttr)
	keyFile, keyOK = b.fileOK(keyAttr)
	if certAttr == nil || certFile == "" {
		b.errorf(certAttr, "cert_file", "Missing certificate", "cert_file is required.")
	}
	if keyAttr == nil || keyFile == "" {
		b.errorf(keyAttr, "key_file", "Missing private key", "key_file is required.")
	}
	if certOK && keyOK {
		if c := b.keyPair(certAttr, keyAttr, certFile, keyFile); c != nil {
			leaf = leafInfo{ok: true, dnsNames: c.DNSNames, name: certName(c)}
		}
	}
	return certFile, keyFile, leaf
}

// leafInfo is what the tls block checks need of a loaded certificate.
type leafInfo struct {
	ok       bool
	dnsNames []string
	name     string // certName
}

// certKey is certKeyLeaf for the default certificate.
func (b blk) certKey(certAttr, keyAttr *hcl2.Attribute) (certFile, keyFile string) {
	certFile, keyFile, _ = b.certKeyLeaf(certAttr, keyAttr)
	return certFile, keyFile
}

// selectableCertKey is certKeyLeaf for a certificate block, which SNI
// selects by the DNS names of its SANs: a certificate without one is an
// error at its cert_file. ok reports a usable certificate.
func (b blk) selectableCertKey(certAttr, keyAttr *hcl2.Attribute) (certFile, keyFile string, ok bool) {
	certFile, keyFile, leaf := b.certKeyLeaf(certAttr, keyAttr)
	if !leaf.ok {
		return certFile, keyFile, false
	}
	if len(leaf.dnsNames) == 0 {
		b.errorf(certAttr, "", "Certificate without a DNS name",
			"%q (%s) has no DNS name in its Subject Alternative Names, so no SNI name can select it; "+
				"issue it with the names it serves, or make it the tls block's default cert_file.", certFile, leaf.name)
		return certFile, keyFile, false
	}
	return certFile, keyFile, true
}
