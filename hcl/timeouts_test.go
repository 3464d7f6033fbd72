package hcl

import (
	"strings"
	"testing"
	"time"
)

// upstreamWithTimeouts is a configuration whose upstream has the timeouts
// block body given.
func upstreamWithTimeouts(body string) string {
	return testListener + `upstream "u" {
  route {}
  backend "a" { address = "x:1" }
  timeouts {
` + body + `
  }
}`
}

func TestTimeoutsLadder(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       Timeouts // when valid
		err        string   // else a part of the error text
	}{
		{name: "defaults", body: ``,
			want: Timeouts{Connect: 2 * time.Second, ResponseHeader: 30 * time.Second, Idle: 90 * time.Second, BodyIdle: time.Minute}},
		{name: "every rung", body: `connect = "1s"
    response_header = "5s"
    idle = "30s"
    body_idle = "15s"
    request = "10s"`,
			want: Timeouts{Connect: time.Second, ResponseHeader: 5 * time.Second, Idle: 30 * time.Second, BodyIdle: 15 * time.Second, Request: 10 * time.Second}},
		// Defaults longer than request are cut short by it, not an error.
		{name: "request alone", body: `request = "1s"`,
			want: Timeouts{Connect: 2 * time.Second, ResponseHeader: 30 * time.Second, Idle: 90 * time.Second, BodyIdle: time.Minute, Request: time.Second}},
		{name: "equal rungs", body: `connect = "2s"
    response_header = "2s"
    request = "2s"`,
			want: Timeouts{Connect: 2 * time.Second, ResponseHeader: 2 * time.Second, Idle: 90 * time.Second, BodyIdle: time.Minute, Request: 2 * time.Second}},
		{name: "request 0s is none", body: `request = "0s"
    response_header = "5m"`,
			want: Timeouts{Connect: 2 * time.Second, ResponseHeader: 5 * time.Minute, Idle: 90 * time.Second, BodyIdle: time.Minute}},
		// body_idle bounds each wait, not the exchange: longer than request is fine.
		{name: "body_idle over request", body: `body_idle = "5m"
    request = "1m"`,
			want: Timeouts{Connect: 2 * time.Second, ResponseHeader: 30 * time.Second, Idle: 90 * time.Second, BodyIdle: 5 * time.Minute, Request: time.Minute}},
		{name: "connect over request", body: `connect = "3s"
    request = "2s"`,
			err: `test.hcl:13:11: Inconsistent timeouts: upstream "u" timeouts connect: connect (3s) must not be longer than the request timeout (2s)`},
		{name: "response_header over request", body: `response_header = "2500ms"
    request = "2s"`,
			err: `test.hcl:13:19: Inconsistent timeouts: upstream "u" timeouts response_header: response_header (2.5s) must not be longer than the request timeout (2s)`},
		{name: "negative request", body: `request = "-1s"`,
			err: `upstream "u" timeouts request: "-1s" is out of range (0s..`},
		{name: "zero body_idle", body: `body_idle = "0s"`,
			err: `upstream "u" timeouts body_idle: "0s" is out of range (greater than 0s`},
		{name: "bad body_idle", body: `body_idle = "soon"`,
			err: `upstream "u" timeouts body_idle: "soon" is not a duration`},
		// An invalid request never makes a rung look inconsistent.
		{name: "invalid request, long connect", body: `connect = "1h"
    request = "bogus"`,
			err: `"bogus" is not a duration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := upstreamWithTimeouts(tc.body)
			if tc.err == "" {
				if got := mustParse(t, src).Upstreams[0].Timeouts; got != tc.want {
					t.Errorf("timeouts %+v, want %+v", got, tc.want)
				}
				return
			}
			got := parseErrors(t, src)
			if !strings.Contains(got, tc.err) {
				t.Errorf("errors:\n%s\nwant one containing %q", got, tc.err)
			}
			if strings.Count(got, "\n") > 1 || (tc.name == "invalid request, long connect" && strings.Contains(got, "Inconsistent")) {
				t.Errorf("more errors than the one expected:\n%s", got)
			}
		})
	}
}
