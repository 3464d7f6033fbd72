package hcl

import (
	"reflect"
	"testing"
	"time"
)

// TestRetryAndHedge: an upstream without retry and hedge blocks gets the
// default retry settings and no hedging; every attribute of both blocks is
// read.
func TestRetryAndHedge(t *testing.T) {
	cfg := mustParse(t, testListener+testUpstream)
	if u := cfg.Upstreams[0]; !reflect.DeepEqual(u.Retry, DefaultRetry()) || u.Hedge != nil {
		t.Errorf("defaults: retry %+v, hedge %+v", u.Retry, u.Hedge)
	}
	want := Retry{Attempts: 3, On: []string{"connect-failure", "reset", "503"}, PerTryTimeout: 500 * time.Millisecond,
		Backoff: 10 * time.Millisecond, MaxBodyBytes: 0, BudgetPercent: 50, MinRetryConcurrency: 0}
	cfg = mustParse(t, testListener+`
upstream "web" {
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
  retry {
    attempts              = 3
    on                    = ["connect-failure", "reset", "503"]
    per_try_timeout       = "500ms"
    backoff               = "10ms"
    max_body_bytes        = 0
    budget_percent        = 50
    min_retry_concurrency = 0
  }
  hedge {
    delay = "40ms"
    max   = 2
  }
}
`)
	u := cfg.Upstreams[0]
	if !reflect.DeepEqual(u.Retry, want) {
		t.Errorf("retry %+v, want %+v", u.Retry, want)
	}
	if u.Hedge == nil || *u.Hedge != (Hedge{Delay: 40 * time.Millisecond, Max: 2}) {
		t.Errorf("hedge %+v", u.Hedge)
	}
	cfg = mustParse(t, testListener+`
upstream "web" {
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
  hedge {
    delay = "50ms"
  }
}
`)
	if h := cfg.Upstreams[0].Hedge; h == nil || h.Max != DefaultHedgeMax {
		t.Errorf("hedge max default: %+v", h)
	}
}
