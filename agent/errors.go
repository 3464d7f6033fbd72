package agent

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	hcl2 "github.com/hashicorp/hcl/v2"

	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// ErrDraining is returned by Reload once the graceful shutdown has begun:
// the configuration is no longer applied (POST /v1/reload answers 409).
var ErrDraining = errors.New("agent: the gateway is draining (shutting down); reload refused")

// configErr is a *ConfigError with one error diagnostic in validate's
// format: Subject rng (none when rng is zero, e.g. a default value), the
// summary, and a Detail "<field>: <message>." that names the field.
func configErr(rng hcl2.Range, summary, field string, err error) *ConfigError {
	msg := strings.TrimPrefix(err.Error(), "tls: ") // crypto/tls's own prefix: no "tls cert_file: tls: ..."
	d := &hcl2.Diagnostic{Severity: hcl2.DiagError, Summary: summary, Detail: field + ": " + msg + "."}
	if rng.Filename != "" {
		r := rng
		d.Subject = &r
	}
	return &ConfigError{Diags: hcl2.Diagnostics{d}}
}

// loadKeyPair loads the certificate and key of a tls block whose field path
// is path (`listener "public" tls`). Errors are *ConfigError pointing at
// cert_file when the certificate cannot be read or parsed, at key_file for
// everything else (unreadable, not a key, not the certificate's key).
func loadKeyPair(t *hcl.TLS, path string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(t.CertFile)
	if err != nil {
		return tls.Certificate{}, configErr(t.CertFileRange, "Cannot read certificate", path+" cert_file", err)
	}
	if err := checkCertificates(certPEM); err != nil {
		return tls.Certificate{}, configErr(t.CertFileRange, "Invalid certificate", path+" cert_file", fmt.Errorf("%s: %w", t.CertFile, err))
	}
	keyPEM, err := os.ReadFile(t.KeyFile)
	if err != nil {
		return tls.Certificate{}, configErr(t.KeyFileRange, "Cannot read private key", path+" key_file", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, configErr(t.KeyFileRange, "Invalid private key", path+" key_file",
			fmt.Errorf("%s: %s", t.KeyFile, strings.TrimPrefix(err.Error(), "tls: ")))
	}
	return cert, nil
}

// checkCertificates reports whether pemBytes holds at least one PEM
// CERTIFICATE block and every such block parses as X.509.
func checkCertificates(pemBytes []byte) error {
	n := 0
	for rest := pemBytes; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return errors.New("no PEM CERTIFICATE block")
	}
	return nil
}

// readToken reads the control API token from token_file (rng its source
// range). Errors are *ConfigError at token_file.
func readToken(path string, rng hcl2.Range) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", configErr(rng, "Cannot read token file", "control token_file", err)
	}
	token, err := hcl.ParseToken(b)
	if err != nil {
		return "", configErr(rng, "Unusable token file", "control token_file", fmt.Errorf("%q %w", path, err))
	}
	return token, nil
}

// bindError turns a listener bind failure of the gateway into a
// diagnostic at that listener's address, and an access log file it cannot
// open into one at access_log path; other errors are returned as they are.
func bindError(cfg *hcl.Config, err error) error {
	var oe *accesslog.OpenError
	if errors.As(err, &oe) && cfg.AccessLog != nil {
		return configErr(cfg.AccessLog.PathRange, "Cannot open access log", "access_log path", fmt.Errorf("%q: %w", oe.Path, oe.Err))
	}
	var le *gateway.ListenerError
	if !errors.As(err, &le) {
		return err
	}
	for _, l := range cfg.Listeners {
		if l.Name == le.Name {
			return configErr(l.AddressRange, "Cannot bind listener address", fmt.Sprintf("listener %q address", l.Name), le.Err)
		}
	}
	return err
}

// diagLines are err's diagnostics in validate's one-line format, or err's
// text when it carries none; never empty.
func diagLines(err error) []string {
	var lines []string
	var ce *ConfigError
	if errors.As(err, &ce) {
		for _, d := range ce.Diags {
			lines = append(lines, hcl.FormatDiagnostic(d))
		}
	}
	if len(lines) == 0 {
		lines = []string{err.Error()}
	}
	return lines
}
