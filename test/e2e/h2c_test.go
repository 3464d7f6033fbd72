package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// newH2CBackend is a backend that speaks only cleartext HTTP/2 with prior
// knowledge and answers "NAME h2c" to requests that came that way.
func newH2CBackend(t *testing.T, name string) (host string, port int) {
	t.Helper()
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 || r.TLS != nil {
			http.Error(w, "not h2c", http.StatusBadRequest)
			return
		}
		io.WriteString(w, name+" h2c")
	}))
	s.Config.Protocols = new(http.Protocols)
	s.Config.Protocols.SetUnencryptedHTTP2(true)
	s.Start()
	t.Cleanup(s.Close)
	h, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	port, _ = strconv.Atoi(p)
	return h, port
}

// TestConsulH2CSchemes: every Consul backend source can say h2c — an
// upstream's consul scheme = "h2c", an instance's ServiceMeta
// impulse-scheme = "h2c" over an upstream scheme of http, and the catalog's
// default_scheme = "h2c" — and each instance is then reached over cleartext
// HTTP/2 (the backends speak nothing else) and listed with protocol h2c.
func TestConsulH2CSchemes(t *testing.T) {
	consul := sharedConsul(t)
	t.Cleanup(func() {
		for _, id := range []string{"h2c-scheme-1", "h2c-meta-1", "h2c-cat-1"} {
			_ = consul.Client().Agent().ServiceDeregister(id)
		}
	})
	h, p := newH2CBackend(t, "scheme")
	consul.RegisterTTL(t, "h2c-scheme-1", "e2e-h2c-scheme", h, p, nil, nil)
	h, p = newH2CBackend(t, "meta")
	consul.RegisterTTL(t, "h2c-meta-1", "e2e-h2c-meta", h, p, nil, map[string]string{"impulse-scheme": "h2c"})
	h, p = newH2CBackend(t, "catalog")
	consul.RegisterTTL(t, "h2c-cat-1", "e2e-h2c-cat", h, p, []string{"impulse.route=/cat"}, nil)

	a := startAgent(t, baseHCL()+fmt.Sprintf(`
consul {
  address = %q
  wait    = "5s"
  catalog {
    default_scheme = "h2c"
  }
}

upstream "by-scheme" {
  route {
    path_prefix = "/scheme"
  }
  consul {
    service = "e2e-h2c-scheme"
    scheme  = "h2c"
  }
}

upstream "by-meta" {
  route {
    path_prefix = "/meta"
  }
  consul {
    service = "e2e-h2c-meta"
    scheme  = "http"
  }
}
`, consul.Addr()))
	waitFor(t, 15*time.Second, "the three h2c instances in /v1/backends", func() bool {
		n := 0
		for _, b := range a.backends() {
			if b.Protocol == "h2c" && b.Membership == "active" {
				n++
			}
		}
		return n == 3
	})
	c, _ := newH3Client(t)
	for path, want := range map[string]string{"/scheme": "scheme h2c", "/meta": "meta h2c", "/cat": "catalog h2c"} {
		waitFor(t, 10*time.Second, path+" answered over h2c", func() bool {
			r, err := get(c, a.URL(path))
			return err == nil && r.Status == 200 && r.Body == want
		})
	}
}
