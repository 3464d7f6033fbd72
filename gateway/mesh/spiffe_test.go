package mesh

import (
	"crypto/x509"
	"errors"
	"net/url"
	"strings"
	"testing"
)

const td = "11111111-2222-3333-4444-555555555555.consul"

func TestParseServiceID(t *testing.T) {
	ok := []struct {
		uri  string
		want ServiceID
	}{
		{"spiffe://" + td + "/ns/default/dc/dc1/svc/web", ServiceID{TrustDomain: td, Namespace: "default", Datacenter: "dc1", Service: "web"}},
		{"spiffe://" + td + "/ap/team/ns/ops/dc/eu-1/svc/db_2", ServiceID{TrustDomain: td, Partition: "team", Namespace: "ops", Datacenter: "eu-1", Service: "db_2"}},
		{"spiffe://" + td + "/ap/default/ns/default/dc/dc1/svc/web", ServiceID{TrustDomain: td, Namespace: "default", Datacenter: "dc1", Service: "web"}},
		{"spiffe://x/ns/n/dc/d/svc/S.v-1", ServiceID{TrustDomain: "x", Namespace: "n", Datacenter: "d", Service: "S.v-1"}},
	}
	for _, c := range ok {
		got, err := ParseServiceID(c.uri)
		if err != nil || got != c.want {
			t.Errorf("ParseServiceID(%q) = %+v, %v; want %+v", c.uri, got, err, c.want)
		}
	}
	if s := ok[1].want.String(); s != ok[1].uri {
		t.Errorf("String() = %q, want %q", s, ok[1].uri)
	}
	if s := ok[2].want.String(); s != "spiffe://"+td+"/ns/default/dc/dc1/svc/web" {
		t.Errorf("String() of the default partition = %q", s)
	}

	bad := []struct {
		uri  string
		want error
	}{
		{"https://" + td + "/ns/default/dc/dc1/svc/web", ErrNotSPIFFE},
		{"spiffe:///ns/default/dc/dc1/svc/web", ErrNotSPIFFE},
		{"spiffe://Upper.consul/ns/default/dc/dc1/svc/web", ErrNotSPIFFE},
		{"spiffe://" + td + ":8443/ns/default/dc/dc1/svc/web", ErrNotSPIFFE},
		{"spiffe://user@" + td + "/ns/default/dc/dc1/svc/web", ErrNotSPIFFE},
		{"spiffe://" + td + "/ns/default/dc/dc1/svc/web?x=1", ErrNotSPIFFE},
		{"spiffe://" + td + "/ns/default/dc/dc1/svc/web#f", ErrNotSPIFFE},
		{"spiffe://" + td + "/ns/default/dc/dc1/svc/web/", ErrNotSPIFFE},
		{"spiffe://" + td + "/ns/default/dc/dc1/svc/%77eb", ErrNotSPIFFE},
		{"spiffe://" + td + "/ns/default/dc/dc1/svc/../web", ErrNotSPIFFE},
		{"spiffe://" + td + "/ns//dc/dc1/svc/web", ErrNotSPIFFE},
		{"spiffe://" + td + "/ns/default/dc/dc1/svc/" + strings.Repeat("a", 2100), ErrNotSPIFFE},
		{"spiffe://" + td, ErrNotService},
		{"spiffe://" + td + "/agent/client/dc/dc1/id/2c0a6f3d", ErrNotService},
		{"spiffe://" + td + "/agent/server/dc/dc1", ErrNotService},
		{"spiffe://" + td + "/gateway/mesh/dc/dc1", ErrNotService},
		{"spiffe://" + td + "/ns/default/dc/dc1/svc/web/extra", ErrNotService},
		{"spiffe://" + td + "/ap/p/ns/default/dc/dc1/xyz/web", ErrNotService},
		{"spiffe://" + td + "/svc/web/dc/dc1/ns/default", ErrNotService},
	}
	for _, c := range bad {
		got, err := ParseServiceID(c.uri)
		var ie *IDError
		if !errors.Is(err, c.want) || !errors.As(err, &ie) || got != (ServiceID{}) {
			t.Errorf("ParseServiceID(%q) = %+v, %v; want %v", c.uri, got, err, c.want)
		}
	}
}

func TestCertServiceID(t *testing.T) {
	u := func(s string) *url.URL { x, _ := url.Parse(s); return x }
	web := "spiffe://" + td + "/ns/default/dc/dc1/svc/web"
	id, err := CertServiceID(&x509.Certificate{URIs: []*url.URL{u(web)}, DNSNames: []string{"db.service.consul"}})
	if err != nil || id.Service != "web" {
		t.Fatalf("one SPIFFE URI: %+v, %v", id, err)
	}
	for name, uris := range map[string][]*url.URL{
		"none":       nil,
		"two":        {u(web), u("spiffe://" + td + "/ns/default/dc/dc1/svc/db")},
		"two, equal": {u(web), u(web)},
	} {
		if _, err := CertServiceID(&x509.Certificate{URIs: uris}); !errors.Is(err, ErrURISANs) {
			t.Errorf("%s: %v, want ErrURISANs", name, err)
		}
	}
	if _, err := CertServiceID(&x509.Certificate{URIs: []*url.URL{u("urn:x:web")}}); !errors.Is(err, ErrNotSPIFFE) {
		t.Errorf("a URN: %v, want ErrNotSPIFFE", err)
	}
}
