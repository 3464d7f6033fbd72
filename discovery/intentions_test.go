package discovery

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestDecodeIntentionMatch(t *testing.T) {
	body := `{"web":[
	  {"ID":"i1","SourceNS":"default","SourceName":"client","DestinationNS":"default","DestinationName":"web","SourceType":"consul",
	   "Permissions":[{"Action":"allow","HTTP":{"PathPrefix":"/api/","Methods":["GET"],"Header":[{"Name":"X-Role","Exact":"ops","Invert":true}]}},
	                  {"Action":"deny","JWT":{"Providers":[{"Name":"okta"}]}}],"Precedence":9},
	  null,
	  {"SourceName":"*","DestinationName":"web","Action":"deny","Precedence":8,"SourceSamenessGroup":"g"}],
	 "db":[{"SourceName":"x","DestinationName":"db","Action":"allow"}]}`
	got, err := DecodeIntentionMatch([]byte(body), "web")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "i1" || got[1].SourceName != "*" || got[1].Precedence != 8 {
		t.Fatalf("intentions %+v: want web's two, in Consul's order, null dropped", got)
	}
	p := got[0].Permissions
	if len(p) != 2 || p[0].HTTP == nil || p[0].HTTP.Methods[0] != "GET" || p[0].HTTP.Header[0] != (IntentionHeader{Name: "X-Role", Exact: "ops", Invert: true}) ||
		!p[1].JWT || p[1].HTTP != nil || p[0].JWT {
		t.Fatalf("permissions %+v", p)
	}
	if got[1].SourcePeer != "sameness-group:g" {
		t.Fatalf("a sameness-group source must match no local identity: peer %q", got[1].SourcePeer)
	}
	if !got[0].equal(got[0]) || got[0].equal(got[1]) {
		t.Fatal("equal")
	}
	if none, err := DecodeIntentionMatch([]byte(`{}`), "web"); err != nil || len(none) != 0 {
		t.Fatalf("no entry: %v %v", none, err)
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	if _, err := DecodeIntentionMatch([]byte(`{"web":`), "web"); !errors.As(err, &se) {
		t.Fatalf("truncated: %v", err)
	}
	if _, err := DecodeIntentionMatch([]byte(`{"web":[{"Precedence":"9"}]}`), "web"); !errors.As(err, &te) {
		t.Fatalf("wrong type: %v", err)
	}
}
