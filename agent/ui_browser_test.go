package agent

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
	"github.com/hashicorp/consul/api"

	"github.com/impulse-agent/impulse-agent/internal/testtool"
	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// chromiumBin is Debian's chromium (CHROMIUM_BIN overrides). When it is
// missing and this is root with apt-get, scripts/deps.sh installs it
// (CI does so before the tests); otherwise the test is skipped, but never
// in CI.
func chromiumBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM_BIN"); p != "" {
		return p
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if _, err := exec.LookPath("apt-get"); err == nil && os.Getuid() == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		start := time.Now()
		out, err := exec.CommandContext(ctx, "bash", filepath.Join("..", "scripts", "deps.sh")).CombinedOutput()
		t.Logf("scripts/deps.sh (installs chromium) took %s: %v\n%s", time.Since(start).Round(time.Second), err, out)
		if p, err := exec.LookPath("chromium"); err == nil {
			return p
		}
	}
	testtool.Missing(t, "chromium (Debian chromium) not installed and cannot be (not root, or no apt-get): run scripts/deps.sh as root")
	return ""
}

// browser starts a headless chromium with the flags this machine needs
// (no network but loopback: no background traffic) and a fresh profile,
// bounded by timeout. It is killed when the test ends.
func browser(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumBin(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	tctx, cancelTimeout := context.WithTimeout(actx, timeout)
	ctx, cancelBrowser := chromedp.NewContext(tctx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		// Close the browser, then make sure its processes are gone.
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = chromedp.Cancel(ctx)
		cancelBrowser()
		cancelTimeout()
		cancelAlloc()
		done := make(chan struct{})
		go func() {
			chromedp.FromContext(ctx).Allocator.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-cctx.Done():
			t.Error("chromium did not exit within 10s")
		}
	})
	return ctx
}

// answerAuth answers every Basic challenge of the tab with user and
// password, as a user typing into the browser's prompt, and lets every
// other request through; it counts the challenges.
func answerAuth(t *testing.T, ctx context.Context, user, password string) *atomic.Int64 {
	t.Helper()
	var challenges atomic.Int64
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	auths := chromedp.Events(ctx, fetch.AuthRequired)
	on := true
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: &on}); err != nil {
		t.Fatalf("Fetch.enable: %v", err)
	}
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		}
	}()
	go func() {
		for ev, err := range auths {
			if err != nil {
				return
			}
			challenges.Add(1)
			_, _ = chromedp.Call(ctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: ev.RequestID,
				AuthChallengeResponse: &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseProvideCredentials, Username: user, Password: password}})
		}
	}()
	return &challenges
}

// pageView is what the status page shows, read from its DOM.
type pageView struct {
	Error     string   `json:"error"`
	Ready     string   `json:"ready"`
	Listeners []string `json:"listeners"`
	Routes    []string `json:"routes"`
	Upstreams []string `json:"upstreams"`
	Backends  []string `json:"backends"` // "upstream id status"
	Watches   []string `json:"watches"`
	Charts    int      `json:"charts"`
	Bars      int      `json:"bars"` // request-rate bars over all charts
	Text      string   `json:"text"`
}

const readPage = `(() => {
  const all = (sel, f) => [...document.querySelectorAll(sel)].map(f);
  const err = document.getElementById("error");
  return {
    error: err.hidden ? "" : err.textContent,
    ready: document.getElementById("ready").textContent,
    listeners: all("tr.listener", (r) => r.dataset.name + " " + r.cells[1].textContent),
    routes: all("tr.route", (r) => r.dataset.upstream + " " + r.cells[2].textContent + " " + r.cells[6].textContent),
    upstreams: all("div.upstream", (d) => d.dataset.name),
    backends: all("tr.backend", (r) => r.dataset.upstream + " " + r.dataset.id + " " + r.dataset.status),
    watches: all("tr.watch", (r) => r.dataset.service),
    charts: document.querySelectorAll("svg.chart").length,
    bars: document.querySelectorAll("svg.chart rect.req").length,
    text: document.body.innerText,
  };
})()`

// TestStatusPageInBrowser loads /ui/ in a real browser (Debian chromium
// through chromedp), answering the page's Basic challenge with the control
// token, and checks its content: the listener with its protocols and
// certificate expiry, the routes with their source, both upstreams and
// their backend rows, the Consul watch and the charts. Then a Consul check
// turns critical and the backend's row turns "down" within 2 s, without a
// reload of the page. A screenshot is left in $TEST_ARTIFACTS (or the
// test's temporary directory).
func TestStatusPageInBrowser(t *testing.T) {
	ctx := browser(t, 90*time.Second)
	consul := consultest.Start(t)
	const token, service = "page-token", "ui-web"
	web1, web2, static := backend(t, "web-1"), backend(t, "web-2"), backend(t, "static")
	check1 := consul.RegisterTTL(t, "web-1", service, "127.0.0.1", portOf(t, web1), nil, nil)
	consul.RegisterTTL(t, "web-2", service, "127.0.0.1", portOf(t, web2), nil, nil)

	cfg, _, _ := statusConfig(t, token)
	cfg += fmt.Sprintf(`
consul {
  address = %q
  wait    = "5s"
}
upstream "consul-web" {
  route {
    path_prefix = "/consul"
  }
  consul {
    service = %q
    scheme  = "http"
  }
}
upstream "static" {
  route {
    path_prefix = "/static"
  }
  backend "static-1" {
    address = %q
  }
}
`, consul.Addr(), service, static.URL)
	r := start(t, cfg)
	id1, id2 := consul.Node()+"/web-1", consul.Node()+"/web-2"
	deadline := time.Now().Add(15 * time.Second)
	for {
		up := 0
		for _, b := range r.statusOf(t, "Bearer "+token).Backends {
			if b.Upstream == "consul-web" && b.Status == "up" {
				up++
			}
		}
		if up == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consul-web never had 2 backends up: %+v", r.statusOf(t, "Bearer "+token).Backends)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, path := range []string{"/consul/a", "/consul/b", "/static/c", "/nothing-here"} {
		r.get(t, r.url("main", path))
	}

	challenges := answerAuth(t, ctx, "operator", token)
	pageURL := "http://" + r.a.ControlAddr().String() + "/ui/"
	if err := chromedp.Do(ctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatalf("navigate %s: %v", pageURL, err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`Number(document.body.dataset.polls || 0) >= 2`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the page never updated itself: %v", err)
	}
	view, err := chromedp.Run(ctx, chromedp.Evaluate[pageView](readPage))
	if err != nil {
		t.Fatal(err)
	}
	// Asked once, for the page: its script, style sheet and polls carry
	// the credentials the browser keeps for /ui/.
	if n := challenges.Load(); n != 1 {
		t.Errorf("the browser was asked for credentials %d times, want once", n)
	}
	want := func(what string, got []string, items ...string) {
		t.Helper()
		for _, it := range items {
			found := false
			for _, g := range got {
				found = found || strings.Contains(g, it)
			}
			if !found {
				t.Errorf("page %s %q lack %q", what, got, it)
			}
		}
	}
	if view.Error != "" || view.Ready != "ok" {
		t.Errorf("page error %q, readiness %q", view.Error, view.Ready)
	}
	want("listeners", view.Listeners, "main h1, h2, h3")
	want("routes", view.Routes, "consul-web /consul hcl", "static /static hcl", "web / hcl")
	if len(view.Upstreams) != 3 || view.Charts != 3 || view.Bars < 3 {
		t.Errorf("upstreams %q with %d charts, %d bars; want 3 upstreams with a chart each, each with traffic", view.Upstreams, view.Charts, view.Bars)
	}
	want("backends", view.Backends, "consul-web "+id1+" up", "consul-web "+id2+" up", "static static-1 up", "web good up", "web bad down")
	want("watches", view.Watches, service)
	for _, s := range []string{"default: expires in", "status 503", "generation 1", "/v1/health/state/critical"} {
		if !strings.Contains(view.Text, s) {
			t.Errorf("page text lacks %q", s)
		}
	}

	// Flip web-1's Consul check: its row must turn down, in this page.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.notReloaded = true`)); err != nil {
		t.Fatal(err)
	}
	consul.SetCheck(t, check1, api.HealthCritical)
	flipped := time.Now()
	row := fmt.Sprintf(`document.querySelector('tr.backend[data-upstream="consul-web"][data-id=%s]')`, strconv.Quote(id1))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](row+`?.dataset.status === "down"`,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(2*time.Second))); err != nil {
		view, _ := chromedp.Run(ctx, chromedp.Evaluate[pageView](readPage))
		t.Fatalf("%s's row not down within 2s of the check turning critical: %v\nrows %q", id1, err, view.Backends)
	}
	took := time.Since(flipped)
	reason, err := chromedp.Run(ctx, chromedp.Evaluate[string](row+`.querySelector("td.status").textContent + " | " + String(window.notReloaded)`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reason, "consul: critical") || !strings.HasSuffix(reason, "| true") {
		t.Errorf("down row says %q, want the Consul status and no page reload", reason)
	}
	t.Logf("%s's row turned down %s after the check turned critical: %s", id1, took.Round(time.Millisecond), reason)

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, "status-page.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(shot))

	// Opened with the credentials in the URL, the page still updates
	// itself: its polls use an origin-absolute URL (fetch refuses one with
	// credentials).
	credURL := "http://operator:" + token + "@" + r.a.ControlAddr().String() + "/ui/"
	if err := chromedp.Do(ctx, chromedp.Navigate(credURL)); err != nil {
		t.Fatalf("navigate with credentials: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`Number(document.body.dataset.polls || 0) >= 2`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		view, _ := chromedp.Run(ctx, chromedp.Evaluate[pageView](readPage))
		t.Fatalf("a page opened with credentials in its URL never updated: %v (error %q)", err, view.Error)
	}
}

// portOf is the port of a test server.
func portOf(t *testing.T, s *httptest.Server) int {
	t.Helper()
	_, p, err := net.SplitHostPort(s.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}
