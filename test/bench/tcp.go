package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// tcpShapes are the shapes of the TCP section (issue 10): small GETs over
// HTTP/2 on one connection with 50 streams and on 50 connections, and over
// HTTP/1.1 on 50 connections, all over TLS, driven by h2load.
func tcpShapes() []shape {
	small := shape{key: "small", payload: "small GET (64 B)", path: "/small", expect: smallSize}
	var out []shape
	for _, c := range []struct {
		proto          string
		conns, streams int
	}{{"h2", 1, 50}, {"h2", 50, 1}, {"h1", 50, 1}} {
		sh := small
		sh.proto, sh.conns, sh.streams = c.proto, c.conns, c.streams
		out = append(out, sh)
	}
	return out
}

// tcpKeys are the targets of the TCP section, in table order; the
// previous build of the agent (BASELINE) only when it is built.
var tcpKeys = []string{keyDirectTLS, keyAgentH1, keyAgentBase, keyCaddy, keyCaddyDeb, keyTraefik}

// runTCP measures the TCP shapes with h2load on every server of tcpKeys
// that answers over TCP (one probe per protocol first; the agent before
// its TCP ingress does not), alternating like the matrix.
func (e *env) runTCP(servers map[string]*server, o *harnessOpts, v *verdicts) {
	if e.h2loadBin == "" {
		fmt.Println("TCP section: skipped (needs h2load: apt-get install nghttp2-client)")
		fmt.Println()
		return
	}
	fmt.Println("TCP section: HTTP/2 and HTTP/1.1 over TLS on the same port as HTTP/3, load from h2load (one thread,")
	fmt.Println("on the load generator's core); latency and req/s from its per-request log, CPU cut out of the same window.")
	fmt.Println()
	for _, proto := range []string{"h2", "h1"} {
		var up []*server
		for _, k := range tcpKeys {
			s := servers[k]
			if s == nil {
				continue
			}
			if err := e.probe(s, proto); err != nil {
				fmt.Printf("note: %s does not answer over %s/TLS, skipped: %v\n", targetLabels[k], proto, firstLine(err.Error()))
				continue
			}
			up = append(up, s)
		}
		for _, sh := range tcpShapes() {
			if sh.proto != proto {
				continue
			}
			e.runTCPShape(sh, up, o, v)
		}
	}
}

// runTCPShape runs one TCP shape o.runs times on each of servers,
// alternating, and prints its table.
func (e *env) runTCPShape(sh shape, servers []*server, o *harnessOpts, v *verdicts) {
	if len(servers) == 0 {
		return
	}
	results := map[string][]Result{}
	var paired []float64 // per round: the agent's CPU/request ÷ the better proxy's in the same round
	for r := range o.runs {
		round := map[string]float64{}
		for _, s := range rotate(servers, r) {
			res, err := e.h2load(s, sh.proto, sh.path, sh.conns, sh.streams, o.duration, o.warmup)
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench: %s / %s run %d: %v\n", sh.title(), s.Key, r+1, err)
				continue
			}
			results[s.Key] = append(results[s.Key], res)
			round[s.Key] = res.CPUPerReqUS
			fmt.Fprintf(os.Stderr, "  %-48s run %d/%d  %-26s %8.0f req/s  p99 %9s  %7.1f µs CPU/req  %d errors\n",
				sh.title(), r+1, o.runs, targetLabels[s.Key], res.ReqPerSec, fmtMS(res.Latency.P99), res.CPUPerReqUS, res.ErrorCount)
		}
		if q, ok := pairedRatio(round); ok {
			paired = append(paired, q)
		}
	}
	sums := map[string]summary{}
	for k, rs := range results {
		sums[k] = summarize(sh, rs)
	}
	fmt.Print(shapeTable(sh, tcpKeys, sums, keyDirectTLS, "direct").String())
	fmt.Println()
	v.tcp(sh, sums, paired)
}

// pairedRatio is one round's agent CPU/request over the better (lower) of
// Caddy's and Traefik's in the same round; false when a side is missing.
func pairedRatio(round map[string]float64) (float64, bool) {
	agent, ok := round[keyAgentH1]
	best := math.Inf(1)
	for _, k := range []string{keyCaddy, keyTraefik} {
		if c, ok := round[k]; ok && c > 0 && c < best {
			best = c
		}
	}
	if !ok || math.IsInf(best, 1) {
		return 0, false
	}
	return agent / best, true
}

// tcp records the TCP target of issue 10: the agent's CPU per request at
// most 0.7× the better (lower) of Caddy's and Traefik's, as the ratio of
// the medians and as the median of the per-round ratios (paired: each
// round runs every target back to back, so a slow minute of the shared
// machine weighs on both sides of its ratio).
func (v *verdicts) tcp(sh shape, sums map[string]summary, paired []float64) {
	agent, ok := sums[keyAgentH1]
	if !ok {
		return
	}
	// A refactoring costs nothing: the TCP small GETs cost no more CPU
	// than in the previous build, measured in the same run.
	if base, ok := sums[keyAgentBase]; ok {
		v.add("CPU/req agent TCP ÷ previous build", sh.short(), ratio(agent.cpuPerReq, base.cpuPerReq), 1.0, true, fmtRatio)
	}
	best, bestKey := math.Inf(1), ""
	for _, k := range []string{keyCaddy, keyTraefik} {
		if s, ok := sums[k]; ok && s.cpuPerReq < best {
			best, bestKey = s.cpuPerReq, k
		}
	}
	if bestKey == "" {
		return
	}
	name := strings.Fields(targetLabels[bestKey])[0]
	v.add("CPU/req agent TCP ÷ best of Caddy, Traefik", sh.short()+" (vs "+name+")", ratio(agent.cpuPerReq, best), 0.7, true, fmtRatio)
	if len(paired) > 0 {
		v.add("  same, median of per-round ratios", sh.short(), Median(paired), 0.7, true, fmtRatio)
	}
}

// runPprof takes Go CPU profiles of the agent (its control API serves
// pprof) while h2load sends it small GETs, over HTTP/2 on 1 connection × 50
// streams and over HTTP/1.1 on 50 connections, and prints `go tool pprof
// -top` of each, by flat and by cumulative time.
func (e *env) runPprof(s *server, o *harnessOpts) {
	goBin, err := exec.LookPath("go")
	if err != nil || s == nil || s.control == "" || e.h2loadBin == "" {
		fmt.Println("Go profile: skipped (needs go, h2load and the agent → h1 target)")
		return
	}
	for _, sh := range tcpShapes() {
		if sh.proto == "h2" && sh.conns != 1 {
			continue
		}
		if err := e.probe(s, sh.proto); err != nil {
			fmt.Printf("Go profile: skipped, the agent does not answer over %s: %v\n", sh.proto, firstLine(err.Error()))
			continue
		}
		e.pprofShape(goBin, s, sh, o)
	}
}

// pprofShape profiles the agent s under one TCP shape.
func (e *env) pprofShape(goBin string, s *server, sh shape, o *harnessOpts) {
	done := make(chan error, 1)
	go func() {
		_, err := e.h2load(s, sh.proto, sh.path, sh.conns, sh.streams, o.pprof+2*time.Second, time.Second)
		done <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	file := filepath.Join(e.dir, "agent-"+sh.proto+".pprof")
	err := fetchProfile(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", s.control, int(math.Ceil(o.pprof.Seconds()))), file)
	if lerr := <-done; lerr != nil {
		fmt.Printf("Go profile: load failed: %v\n", lerr)
	}
	if err != nil {
		fmt.Printf("Go profile: %v\n", err)
		return
	}
	where := "run with -keep to keep the profile"
	if o.keep {
		where = "profile: " + file
	}
	fmt.Printf("── Go CPU profile of impulse-agent → h1 under %s, %s (%s) ──\n", sh.title(), o.pprof, where)
	for _, args := range [][]string{{"-top", "-nodecount=30"}, {"-top", "-cum", "-nodecount=45"}} {
		out, err := exec.Command(goBin, append(append([]string{"tool", "pprof"}, args...), e.agentBin, file)...).CombinedOutput()
		if err != nil {
			fmt.Printf("go tool pprof: %v\n", err)
		}
		fmt.Println(string(out))
	}
}

// fetchProfile saves the body of a GET of url to file.
func fetchProfile(url, file string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// firstLine returns s up to its first newline.
func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
