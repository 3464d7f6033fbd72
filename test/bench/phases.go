package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"time"
)

// memSample is one idle-memory measurement of a fresh server.
type memSample struct {
	base, loaded int64 // VmRSS before and with the idle connections
	open         int
}

// perConn is the RSS growth per open connection, in bytes.
func (m memSample) perConn() float64 {
	if m.open == 0 {
		return math.NaN()
	}
	return float64(m.loaded-m.base) / float64(m.open)
}

// runMemory measures, for each key, the RSS of a freshly started server
// before and after o.idleN idle HTTP/3 connections were opened (each after
// one GET /small), alternating the servers across o.memRuns runs.
func (e *env) runMemory(keys []string, o *harnessOpts, v *verdicts) {
	fmt.Printf("idle memory: %d HTTP/3 connections (one GET /small each, then idle with keep-alives) to a fresh server; VmRSS 2 s after the last\n", o.idleN)
	samples := map[string][]memSample{}
	for r := range o.memRuns {
		for _, k := range rotate(keys, r) {
			m, err := e.memoryRun(k, o.idleN)
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench: memory %s run %d: %v\n", k, r+1, err)
				continue
			}
			samples[k] = append(samples[k], m)
			fmt.Fprintf(os.Stderr, "  idle memory run %d/%d  %-24s %s → %s, %d open, %s/conn\n", r+1, o.memRuns, targetLabels[k],
				fmtBytes(float64(m.base)), fmtBytes(float64(m.loaded)), m.open, fmtBytes(m.perConn()))
		}
	}
	t := &Table{
		Title:  fmt.Sprintf("── idle memory, %d HTTP/3 connections ──", o.idleN),
		Header: []string{"target", "RSS before", "RSS with conns", "per conn", "÷ Caddy"},
	}
	type row struct{ base, loaded, per float64 }
	med := map[string]row{}
	for _, k := range keys {
		ss := samples[k]
		if len(ss) == 0 {
			continue
		}
		var base, loaded, per []float64
		for _, s := range ss {
			base = append(base, float64(s.base))
			loaded = append(loaded, float64(s.loaded))
			per = append(per, s.perConn())
		}
		med[k] = row{Median(base), Median(loaded), Median(per)}
	}
	caddy, okCaddy := med[keyCaddy]
	for _, k := range keys {
		m, ok := med[k]
		if !ok {
			continue
		}
		r := math.NaN()
		if okCaddy {
			r = ratio(m.per, caddy.per)
		}
		t.AddRow(targetLabels[k], fmtBytes(m.base), fmtBytes(m.loaded), fmtBytes(m.per), fmtRatio(r))
	}
	if a, ok := med[keyAgentH1]; ok && okCaddy {
		v.add("idle memory/conn agent ÷ Caddy", fmt.Sprintf("%d conns", o.idleN), ratio(a.per, caddy.per), 1.0, true, fmtRatio)
	}
	fmt.Print(t.String())
	fmt.Println()
}

// memoryRun starts a fresh server of key, opens n idle connections to it
// and returns its RSS before and after.
func (e *env) memoryRun(key string, n int) (memSample, error) {
	s, err := e.startServer(key)
	if err != nil {
		return memSample{}, err
	}
	defer s.proc.Stop()
	time.Sleep(time.Second)
	var m memSample
	if m.base, err = ProcessRSS(s.PID()); err != nil {
		return m, err
	}
	idle, err := e.start("idle", e.auxCPU, []string{e.benchBin, "idle", "-n", strconv.Itoa(n),
		"-cacert", e.certFile, "-url", s.Base + "/small"})
	if err != nil {
		return m, err
	}
	defer idle.Stop()
	res, err := idle.waitJSON(3*time.Minute, "open")
	if err != nil {
		return m, err
	}
	m.open = int(res["open"].(float64))
	if failed := int(res["failed"].(float64)); failed > 0 {
		fmt.Fprintf(os.Stderr, "bench: %s: %d idle connections failed\n%s\n", key, failed, idle.Output())
	}
	time.Sleep(2 * time.Second)
	m.loaded, err = ProcessRSS(s.PID())
	return m, err
}

// runLarge streams o.largeSize bytes down and up through each server, one
// request at a time, alternating servers, and reports throughput against the
// bare server and the growth of the server's RSS during the transfer.
func (e *env) runLarge(servers []*server, o *harnessOpts, v *verdicts) {
	size := o.largeSize
	fmt.Printf("large transfers: %s per request, 1 connection, 1 stream; RSS growth = peak VmRSS during the transfer − VmRSS before\n", fmtBytes(float64(size)))
	type sample struct {
		mibps  float64
		growth float64
	}
	for _, dir := range []string{"download", "upload"} {
		samples := map[string][]sample{}
		for r := range o.largeRuns {
			for _, s := range rotate(servers, r) {
				a := loadArgs{path: fmt.Sprintf("/big?size=%d", size), proto: s.Proto, conns: 1, streams: 1,
					requests: 1, expect: size}
				if dir == "upload" {
					a.path, a.bodySize, a.expect = "/upload", size, -1
				}
				before, err := ProcessRSS(s.PID())
				if err != nil {
					fmt.Fprintf(os.Stderr, "bench: %s: %v\n", s.Key, err)
					continue
				}
				res, err := e.load(s, a)
				if err == nil && (res.Requests != 1 || res.ErrorCount > 0) {
					err = fmt.Errorf("transfer failed: %v %v", res.Errors, res.ErrorSamples)
				}
				if err != nil {
					fmt.Fprintf(os.Stderr, "bench: large %s %s run %d: %v\n", dir, s.Key, r+1, err)
					continue
				}
				sm := sample{mibps: float64(size) / (1 << 20) / res.Seconds, growth: float64(res.PeakRSS - before)}
				samples[s.Key] = append(samples[s.Key], sm)
				fmt.Fprintf(os.Stderr, "  large %-8s run %d/%d  %-24s %7.0f MiB/s  RSS %s → peak %s\n", dir, r+1, o.largeRuns,
					targetLabels[s.Key], sm.mibps, fmtBytes(float64(before)), fmtBytes(float64(res.PeakRSS)))
			}
		}
		t := &Table{
			Title:  fmt.Sprintf("── large %s, %s ──", dir, fmtBytes(float64(size))),
			Header: []string{"target", "MiB/s", "÷ bare", "RSS growth"},
		}
		med := map[string][2]float64{}
		for _, s := range servers {
			ss := samples[s.Key]
			if len(ss) == 0 {
				continue
			}
			var tp, gr []float64
			for _, x := range ss {
				tp, gr = append(tp, x.mibps), append(gr, x.growth)
			}
			med[s.Key] = [2]float64{Median(tp), Median(gr)}
		}
		bare, okBare := med[keyBare]
		for _, s := range servers {
			m, ok := med[s.Key]
			if !ok {
				continue
			}
			r := math.NaN()
			if okBare {
				r = ratio(m[0], bare[0])
			}
			t.AddRow(targetLabels[s.Key], fmtFloat(m[0], 0), fmtRatio(r), fmtBytes(m[1]))
		}
		for _, k := range []string{keyAgentH1, keyAgentH2} {
			m, ok := med[k]
			if !ok {
				continue
			}
			label := "h1"
			if k == keyAgentH2 {
				label = "h2"
			}
			if okBare {
				v.add("throughput agent→"+label+" ÷ bare", dir+" "+fmtBytes(float64(size)), ratio(m[0], bare[0]), 0.8, false, fmtRatio)
			}
			v.add("RSS growth agent→"+label, dir+" "+fmtBytes(float64(size)), m[1], memGrowthBound(size), true, fmtBytes)
		}
		fmt.Print(t.String())
		fmt.Println()
	}
}

// memGrowthBound is the RSS growth a large transfer of size bytes may cause:
// 64 MiB, or a quarter of the transfer when that is less (quick runs move
// 64 MiB), so a gateway that buffered whole bodies could not pass.
func memGrowthBound(size int64) float64 { return float64(min(64<<20, size/4)) }
