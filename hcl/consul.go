package hcl

import (
	"os"
	"strconv"
	"strings"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// LookupEnv reads the environment for the Consul defaults (CONSUL_HTTP_ADDR,
// CONSUL_HTTP_SSL, CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE). It is
// os.LookupEnv; tests replace it (or set Loader.LookupEnv) for deterministic
// results. Replace it only before loading starts, never concurrently.
var LookupEnv = os.LookupEnv

// Environment variables read as Consul defaults; the names are Consul's own
// (consul/api DefaultConfig).
const (
	// EnvConsulAddr is the default consul.address ("host:port", optionally
	// with an http:// or https:// prefix that sets the scheme).
	EnvConsulAddr = "CONSUL_HTTP_ADDR"
	// EnvConsulSSL, when a true boolean, makes the default scheme https.
	EnvConsulSSL = "CONSUL_HTTP_SSL"
	// EnvConsulToken is the default ACL token when no token_file applies.
	EnvConsulToken = "CONSUL_HTTP_TOKEN"
	// EnvConsulTokenFile is the default consul.token_file; it wins over
	// CONSUL_HTTP_TOKEN.
	EnvConsulTokenFile = "CONSUL_HTTP_TOKEN_FILE"
)

// buildConsul converts the consul block r (nil: an implicit block holding
// only defaults, reported at def) applying, in order of precedence, the
// file, the environment and the package defaults.
func buildConsul(b blk, r *rawConsul, lookupEnv func(string) (string, bool)) *Consul {
	if r == nil {
		r = &rawConsul{DefRange: b.def}
	}
	b = b.child("consul", r.DefRange)
	env := func(k string) string {
		v, _ := lookupEnv(k)
		return strings.TrimSpace(v)
	}
	before := b.errCount()
	c := &Consul{
		Datacenter:  b.str(r.Datacenter, ""),
		Wait:        b.duration(r.Wait, DefaultConsulWait, MinConsulWait, MaxConsulWait),
		Stale:       b.boolean(r.Stale, false),
		ResyncGrace: b.duration(r.ResyncGrace, DefaultResyncGrace, 0, 10*time.Minute),
	}
	// A blocking query legitimately succeeds only every wait + wait/16, so a
	// smaller bound would report healthy discovery as stale; the default
	// obeys the same floor. With an invalid wait (already reported) the
	// bound is not checked against a default the user did not write.
	minStale := c.Wait + c.Wait/16 + 5*time.Second
	defStale := max(2*c.Wait, minStale)
	if b.errCount() != before {
		c.MaxStaleness = b.duration(r.MaxStaleness, defStale, 0, 24*time.Hour)
	} else {
		c.MaxStaleness = b.duration(r.MaxStaleness, defStale, minStale, 24*time.Hour)
	}

	// Address and scheme: file, then environment, then defaults.
	addrScheme := ""
	addr := b.str(r.Address, "")
	addrAttr := r.Address
	if r.Address == nil {
		addr = env(EnvConsulAddr)
	}
	if addr == "" {
		addr = DefaultConsulAddress
		addrAttr = nil
	}
	lower := strings.ToLower(addr)
	switch {
	case strings.HasPrefix(lower, "http://"):
		addrScheme, addr = "http", addr[len("http://"):]
	case strings.HasPrefix(lower, "https://"):
		addrScheme, addr = "https", addr[len("https://"):]
	}
	if why := checkHostPort(addr, false, false); why != "" {
		if r.Address == nil {
			b.errorf(nil, "address", "Invalid Consul address", "%s (from %s).", why, EnvConsulAddr)
		} else {
			b.errorf(addrAttr, "", "Invalid Consul address", "%s; use host:port, optionally prefixed by http:// or https://.", why)
		}
	}
	c.Address = addr

	switch {
	case r.Scheme != nil:
		c.Scheme = b.oneOf(r.Scheme, DefaultConsulScheme, "http", "https")
		if addrScheme != "" && c.Scheme != addrScheme && r.Address != nil {
			b.errorf(r.Scheme, "", "Conflicting Consul scheme", "scheme %q contradicts the %s:// prefix of address.", c.Scheme, addrScheme)
		}
	case addrScheme != "":
		c.Scheme = addrScheme
	default:
		c.Scheme = DefaultConsulScheme
		if v := env(EnvConsulSSL); v != "" {
			ssl, err := strconv.ParseBool(v)
			if err != nil {
				b.add(hcl2.DiagWarning, b.subject(nil), "Ignored environment variable",
					b.field("scheme")+": "+EnvConsulSSL+"="+strconv.Quote(v)+" is not a boolean; using \"http\".")
			} else if ssl {
				c.Scheme = "https"
			}
		}
	}

	// Token: token and token_file are exclusive in the file; the environment
	// fills in only when neither is set.
	if r.Token != nil && r.TokenFile != nil {
		b.errorf(r.TokenFile, "", "Conflicting arguments", "token and token_file are mutually exclusive.")
	}
	c.Token = b.str(r.Token, "")
	c.TokenFile = b.file(r.TokenFile)
	if r.Token == nil && r.TokenFile == nil {
		if f := env(EnvConsulTokenFile); f != "" {
			c.TokenFile = f
		} else {
			c.Token = env(EnvConsulToken)
		}
	}

	if r.TLS != nil {
		c.TLS = buildClientTLS(b, r.TLS)
		t := c.TLS
		if c.Scheme == "http" && (t.CAFile != "" || t.CertFile != "" || t.ServerName != "" || t.InsecureSkipVerify) {
			// At the tls block, which is what has no effect.
			b.child("tls", r.TLS.DefRange).add(hcl2.DiagWarning, b.child("tls", r.TLS.DefRange).subject(nil), "TLS not used",
				b.field("scheme")+`: "http", so the consul tls settings are not used; write address = "https://...", scheme = "https", or set CONSUL_HTTP_SSL=true.`)
		}
	}
	if g := r.Register; g != nil {
		rb := b.child("register", g.DefRange)
		c.Register = &Register{
			Service: rb.str(g.Service, DefaultRegisterService),
			Tags:    rb.strList(g.Tags, nil),
			Address: rb.str(g.Address, ""),
		}
		if c.Register.Service == "" {
			rb.errorf(g.Service, "", "Invalid value", "must not be empty.")
		}
		if c.Register.Address != "" {
			if why := checkHostPort(c.Register.Address, false, false); why != "" && !validHostname(c.Register.Address) {
				rb.errorf(g.Address, "", "Invalid address", "%s; use a host or host:port.", why)
			}
		}
	}
	if r.Catalog != nil {
		c.Catalog = buildCatalog(b.child("catalog", r.Catalog.DefRange), r.Catalog)
	}
	return c
}

// buildClientTLS converts a client-side tls block (consul.tls, upstream.tls).
// cert_file and key_file go together and must load as a matching pair
// (LoadKeyPair); ca_file must hold at least one certificate (LoadCertPool).
func buildClientTLS(parent blk, r *rawTLS) *TLS {
	b := parent.child("tls", r.DefRange)
	t := &TLS{
		ServerName:         b.str(r.ServerName, ""),
		InsecureSkipVerify: b.boolean(r.InsecureSkipVerify, false),
	}
	var caOK, certOK, keyOK bool
	t.CAFile, caOK = b.fileOK(r.CAFile)
	t.CertFile, certOK = b.fileOK(r.CertFile)
	t.KeyFile, keyOK = b.fileOK(r.KeyFile)
	if caOK {
		b.caFile(r.CAFile, t.CAFile)
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		b.errorf(r.CertFile, "", "Incomplete client certificate", "cert_file needs key_file.")
	case t.KeyFile != "" && t.CertFile == "":
		b.errorf(r.KeyFile, "", "Incomplete client certificate", "key_file needs cert_file.")
	case certOK && keyOK:
		b.keyPair(r.CertFile, r.KeyFile, t.CertFile, t.KeyFile)
	}
	return t
}
