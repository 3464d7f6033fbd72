package consultest

import (
	"testing"

	"github.com/hashicorp/consul/api"
)

// WithACLs enables ACLs with default deny and mgmt as the initial management
// token, which the harness's own client then uses. Blocking health queries
// use the RPC path, not the streaming backend: a streaming subscription set
// up with a token can go on answering after the token is deleted (seen for
// over 20 s under load), and ACL tests revoke tokens.
func WithACLs(mgmt string) Option {
	return func(o *options) {
		o.token = mgmt
		o.config = `acl {
  enabled = true
  default_policy = "deny"
  tokens { initial_management = "` + mgmt + `" }
}
use_streaming_backend = false`
	}
}

// CreateToken creates a policy named name with rules (Consul ACL rule HCL)
// and a token holding it, and returns the token's secret.
func (a *Agent) CreateToken(t testing.TB, name, rules string) string {
	t.Helper()
	acl := a.Client().ACL()
	p, _, err := acl.PolicyCreate(&api.ACLPolicy{Name: name, Rules: rules}, nil)
	if err != nil {
		t.Fatalf("consultest: creating policy %q: %v", name, err)
	}
	tok, _, err := acl.TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: p.ID}}}, nil)
	if err != nil {
		t.Fatalf("consultest: creating a token for %q: %v", name, err)
	}
	return tok.SecretID
}

// RevokeToken deletes the token whose secret is given.
func (a *Agent) RevokeToken(t testing.TB, secret string) {
	t.Helper()
	self, err := api.NewClient(a.apiConfig(secret))
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := self.ACL().TokenReadSelf(nil)
	if err != nil {
		t.Fatalf("consultest: reading the token to revoke: %v", err)
	}
	if _, err := a.Client().ACL().TokenDelete(tok.AccessorID, nil); err != nil {
		t.Fatalf("consultest: revoking the token: %v", err)
	}
}
