package agent

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	hcl2 "github.com/hashicorp/hcl/v2"

	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/gateway/certs"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// listenerConfig converts a listener, loading its TLS material from disk
// into one certs.Store, the source of every handshake on the listener
// (QUIC and TCP alike): the default certificate, the certificate blocks,
// the client CA bundle. It is called on every load, so SIGHUP and POST
// /v1/reload re-read the files. TCP handshakes may negotiate TLS 1.2;
// QUIC always uses 1.3. Errors are *ConfigError at the file at fault
// (cert_file, key_file, client_ca_file), read as hcl.LoadKeyPair and
// hcl.LoadCertPool read them for validate.
func listenerConfig(l hcl.Listener) (gateway.ListenerConfig, error) {
	path := fmt.Sprintf("listener %q tls", l.Name)
	lc := gateway.ListenerConfig{Name: l.Name, Address: l.Address, ForwardClientCert: l.TLS.ForwardClientCert}
	t := l.TLS
	def, err := hcl.LoadKeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return lc, tlsFileErr(err, path, t.CertFileRange, t.KeyFileRange)
	}
	cfg := certs.Config{Default: def}
	for _, c := range t.Certificates {
		cert, err := hcl.LoadKeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return lc, tlsFileErr(err, path+" certificate", c.CertFileRange, c.KeyFileRange)
		}
		cfg.Certificates = append(cfg.Certificates, cert)
	}
	if t.ClientAuth != "" {
		if cfg.ClientAuth, err = certs.ParseClientAuth(t.ClientAuth); err != nil {
			return lc, configErr(hcl2.Range{}, "Invalid client_auth", path+" client_auth", err)
		}
	}
	if t.ClientCAFile != "" {
		var pool *x509.CertPool
		if pool, err = hcl.LoadCertPool(t.ClientCAFile); err != nil {
			return lc, tlsFileErr(err, path, t.ClientCAFileRange, hcl2.Range{})
		}
		cfg.ClientCAs = pool
	}
	store, err := certs.New(cfg)
	if err != nil {
		var ce *certs.CertificateError
		switch {
		case errors.As(err, &ce) && ce.Index >= 0:
			c := t.Certificates[ce.Index]
			return lc, configErr(c.CertFileRange, "Unusable certificate", path+" certificate cert_file", fmt.Errorf("%q: %s", c.CertFile, ce.Reason))
		case errors.As(err, &ce):
			return lc, configErr(t.CertFileRange, "Unusable certificate", path+" cert_file", fmt.Errorf("%q: %s", t.CertFile, ce.Reason))
		}
		return lc, configErr(hcl2.Range{}, "Invalid TLS settings", path, err)
	}
	lc.TLS = store.ServerConfig(tls.VersionTLS12)
	lc.CertificateExpiry = store.Expiries()
	return lc, nil
}

// tlsFileErr turns an *hcl.TLSFileError into a *ConfigError at the range
// of the file at fault (certRange for cert_file and ca_file, keyRange for
// key_file) with validate's summaries; path is the block's field path
// (`listener "public" tls`); a ca_file is the listener's client_ca_file.
func tlsFileErr(err error, path string, certRange, keyRange hcl2.Range) error {
	var fe *hcl.TLSFileError
	if !errors.As(err, &fe) {
		return configErr(certRange, "Invalid TLS material", path, err)
	}
	rng, what := certRange, map[string]string{"cert_file": "certificate", "key_file": "private key", "ca_file": "CA file"}[fe.Field]
	if fe.Field == "key_file" {
		rng = keyRange
	}
	summary := "Invalid " + what
	if strings.HasPrefix(fe.Reason, "cannot read") {
		summary = "Cannot read " + what
	}
	field := fe.Field
	if field == "ca_file" { // the only CA bundle of a listener
		field = "client_ca_file"
	}
	return configErr(rng, summary, path+" "+field, fmt.Errorf("%q: %s", fe.Path, fe.Reason))
}
