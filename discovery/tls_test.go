package discovery

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSecurityConsulTLSVerified backs SECURITY.md's claim that the Consul
// HTTP API's certificate is verified: over https a server the CA does not
// vouch for is refused with the x509 error in the watch status (and no
// snapshot), and the same server is trusted once ca_file names its CA.
func TestSecurityConsulTLSVerified(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Consul-Index", "5")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("[]"))
	}))
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	watch := func(tc TLSConfig) (synced bool, lastError string) {
		c, err := New(Config{Address: srv.URL, TLS: tc, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		emitted := make(chan struct{}, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = c.Watch(ctx, Query{Service: "web"}, func(Snapshot) {
				select {
				case emitted <- struct{}{}:
				default:
				}
			})
		}()
		defer func() { cancel(); <-done }()
		for {
			select {
			case <-emitted:
				return true, ""
			case <-ctx.Done():
				return false, "timed out"
			case <-time.After(20 * time.Millisecond):
			}
			for _, st := range c.Status() {
				if st.LastError != "" {
					return false, st.LastError
				}
			}
		}
	}
	if synced, lastErr := watch(TLSConfig{}); synced || !strings.Contains(lastErr, "certificate") {
		t.Errorf("an unverified Consul: synced %v, error %q", synced, lastErr)
	}
	if synced, lastErr := watch(TLSConfig{CAFile: caFile}); !synced {
		t.Errorf("with ca_file: not synced: %s", lastErr)
	}
}
