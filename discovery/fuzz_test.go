package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// fuzzReply is one scripted Consul answer: a status (0: the transport
// fails), header fields and a body, all from the fuzzer.
type fuzzReply struct {
	status int
	header http.Header
	body   []byte
}

// parseFuzzReplies splits data into at most 8 replies separated by
// "\n===\n"; each is a status line, header lines ("Name: value") up to an
// empty line, then the body. A status that is not a number is 200.
func parseFuzzReplies(data []byte) []fuzzReply {
	var out []fuzzReply
	for i, chunk := range bytes.Split(data, []byte("\n===\n")) {
		if i == 8 {
			break
		}
		head, body, _ := bytes.Cut(chunk, []byte("\n\n"))
		lines := strings.Split(string(head), "\n")
		rep := fuzzReply{status: 200, header: http.Header{}, body: body}
		if n, err := strconv.Atoi(lines[0]); err == nil && (n == 0 || n >= 100 && n <= 999) {
			rep.status = n
		}
		for _, l := range lines[1:] {
			if k, v, ok := strings.Cut(l, ":"); ok {
				rep.header.Add(k, strings.TrimSpace(v))
			}
		}
		out = append(out, rep)
	}
	return out
}

// fuzzTransport answers the watch's queries with the script, in memory,
// recording the index each query sent; after the script it closes done and
// holds the query until the watch gives up.
type fuzzTransport struct {
	script []fuzzReply
	done   chan struct{}

	mu      sync.Mutex
	indexes []uint64 // the ?index= of each query; absent is 0
	paths   []string
}

func (ft *fuzzTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	idx, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	ft.mu.Lock()
	n := len(ft.indexes)
	ft.indexes = append(ft.indexes, idx)
	ft.paths = append(ft.paths, r.URL.Path)
	ft.mu.Unlock()
	if n >= len(ft.script) {
		if n == len(ft.script) {
			close(ft.done)
		}
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	rep := ft.script[n]
	if rep.status == 0 {
		return nil, errors.New("fuzz: connection refused")
	}
	return &http.Response{StatusCode: rep.status, Header: rep.header.Clone(), Body: io.NopCloser(bytes.NewReader(rep.body)),
		ContentLength: -1, Request: r, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

// served is how many queries the transport has seen.
func (ft *fuzzTransport) served() int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return len(ft.indexes)
}

// refMeta reads an answer's header as consul/api does (parseQueryMeta,
// whose error the API ignores: fields after a bad one stay unset): the
// X-Consul-Index and whether ACLs filtered the results.
func refMeta(h http.Header) (index uint64, filtered bool) {
	if s := h.Get("X-Consul-Index"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, false
		}
		index = v
	}
	last, err := strconv.ParseUint(h.Get("X-Consul-LastContact"), 10, 64)
	if err != nil || last > math.MaxInt64 {
		return index, false
	}
	return index, h.Get("X-Consul-Results-Filtered-By-ACLs") == "true"
}

// refEmit is what the watch must emit for one reply: its number in the
// script and the set.
type refEmit[T any] struct {
	reply int
	set   T
	index uint64
}

// refWatch runs the Consul blocking-query rules over the script with the
// resync hold off: the index each query must send, and the snapshots a
// watch emits. decode turns a 200 answer's body into its result; ok false
// is a failed query (as is any other status, a transport failure, or an
// empty answer ACLs filtered).
func refWatch[T any](script []fuzzReply, decode func([]byte) (T, int, bool), same func(a, b T) bool) (sent []uint64, emits []refEmit[T]) {
	var index uint64
	first := true
	var last T
	for i, rep := range script {
		sent = append(sent, index)
		got, filtered := refMeta(rep.header)
		result, n, ok := decode(rep.body)
		if rep.status != 200 || !ok || filtered && n == 0 {
			index = 0
			continue
		}
		if first || got != index {
			if len(emits) == 0 || !same(last, result) {
				emits = append(emits, refEmit[T]{i, result, got})
				last = result
			}
		}
		switch {
		case got < 1:
			index = 1
		case got < index:
			index = 0
		default:
			index = got
		}
		first = false
	}
	return append(sent, index), emits
}

// FuzzWatch feeds a watch (health or catalog) a script of Consul answers
// with arbitrary statuses, headers (X-Consul-Index among them) and JSON
// bodies, through an in-memory transport under consul/api, and checks it
// against refWatch: every query carries the index the blocking-query rules
// give (the first 0, the last good index, 1 for an index 0, 0 after an
// index that went backwards or a failure); failed answers never emit and
// keep the last set; a success emits exactly when its set differs from the
// last one emitted (or is the first) and its index differs from the one
// sent. Emitted sets are sorted, and hold what the body said. Nothing
// panics, and the watch stops at once when canceled.
func FuzzWatch(f *testing.F) {
	entry := `[{"Node":{"Node":"n1","Address":"10.0.0.1"},"Service":{"ID":"web-1","Service":"web","Port":80,"Tags":["edge"],"Weights":{"Passing":3,"Warning":1}},"Checks":[{"CheckID":"serfHealth","Status":"passing"}]}]`
	meta := "X-Consul-Index: %s\nX-Consul-LastContact: 0\nX-Consul-KnownLeader: true"
	rep := func(status, index, body string) string {
		return status + "\n" + strings.Replace(meta, "%s", index, 1) + "\n\n" + body
	}
	cat := `{"web":["edge.host=a.example.com","other"],"db":[],"api":["edge.x","edge.x","edge.a"]}`
	for _, catalog := range []bool{false, true} {
		body := entry
		if catalog {
			body = cat
		}
		f.Add([]byte(rep("200", "5", body)+"\n===\n"+rep("200", "5", body)+"\n===\n"+rep("200", "7", "[]")), catalog)
		f.Add([]byte(rep("200", "5000", body)+"\n===\n"+rep("200", "4200", body)+"\n===\n"+rep("200", "0", body)), catalog)
		f.Add([]byte(rep("500", "9", "No cluster leader")+"\n===\n"+rep("200", "9", body)+"\n===\n0\n\n"), catalog)
		f.Add([]byte(rep("200", "x", body)+"\n===\n"+rep("200", "18446744073709551615", body)+"\n===\n"+rep("200", "-1", "{")), catalog)
		f.Add([]byte("200\nX-Consul-Index: 3\nX-Consul-LastContact: 1\nX-Consul-Results-Filtered-By-ACLs: true\n\n[]\n===\n403\n\nACL not found"), catalog)
		f.Add([]byte("307\nLocation: http://elsewhere.test/v1/health/service/web\n\n===\n"+rep("200", "2", body)), catalog)
		f.Add([]byte(rep("200", "4", `[{"Node":null},{"Node":{},"Service":{"ID":"a","Weights":{"Passing":0}},"Checks":[{"Status":"warning"},{"CheckID":"_node_maintenance","Status":"passing"}]}] trailing`)), catalog)
	}
	f.Fuzz(func(t *testing.T, data []byte, catalog bool) {
		script := parseFuzzReplies(data)
		ft := &fuzzTransport{script: script, done: make(chan struct{})}
		c, err := New(Config{Address: "consul.test:8500", MinBackoff: time.Nanosecond, MaxBackoff: time.Nanosecond,
			Rate: 1e9, Burst: 1 << 20, ResyncGrace: -1})
		if err != nil {
			t.Fatal(err)
		}
		c.http.Transport = ft
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var mu sync.Mutex
		var emitted []int // the reply each emit followed
		var health []Snapshot
		var cats []CatalogSnapshot
		errc := make(chan error, 1)
		q := Query{Service: "web"}
		cq := CatalogQuery{TagPrefix: "edge"}
		if catalog {
			go func() {
				errc <- c.WatchCatalog(ctx, cq, func(s CatalogSnapshot) {
					mu.Lock()
					emitted, cats = append(emitted, ft.served()-1), append(cats, s)
					mu.Unlock()
				})
			}()
		} else {
			go func() {
				errc <- c.Watch(ctx, q, func(s Snapshot) {
					mu.Lock()
					emitted, health = append(emitted, ft.served()-1), append(health, s)
					mu.Unlock()
				})
			}()
		}
		select {
		case <-ft.done:
		case err := <-errc:
			t.Fatalf("watch returned %v before the script ended", err)
		case <-time.After(10 * time.Second):
			t.Fatalf("the watch made %d of %d queries in 10 s", ft.served(), len(script))
		}
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("watch returned %v, want context.Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("watch did not stop within 5 s of cancel")
		}

		var sent []uint64
		var want []int
		if catalog {
			decode := func(b []byte) (map[string][]string, int, bool) {
				var m map[string][]string
				if json.NewDecoder(bytes.NewReader(b)).Decode(&m) != nil {
					return nil, 0, false
				}
				return prefixedServices(m, "edge"), len(m), true
			}
			var emits []refEmit[map[string][]string]
			sent, emits = refWatch(script, decode, func(a, b map[string][]string) bool { return maps.EqualFunc(a, b, slices.Equal[[]string]) })
			if len(emits) != len(cats) {
				t.Fatalf("%d catalog snapshots, want %d", len(cats), len(emits))
			}
			for i, e := range emits {
				want = append(want, e.reply)
				if !maps.EqualFunc(e.set, cats[i].Services, slices.Equal[[]string]) || e.index != cats[i].Index {
					t.Fatalf("snapshot %d: %v at %d, want %v at %d", i, cats[i].Services, cats[i].Index, e.set, e.index)
				}
				for name, tags := range cats[i].Services {
					if len(tags) == 0 || !slices.IsSorted(tags) || len(slices.Compact(slices.Clone(tags))) != len(tags) {
						t.Fatalf("service %q: tags %q not a sorted set", name, tags)
					}
					for _, tag := range tags {
						if !strings.HasPrefix(tag, "edge.") {
							t.Fatalf("service %q: tag %q without the prefix", name, tag)
						}
					}
				}
			}
		} else {
			// A snapshot is new when its instances or the ones the health
			// policy left out (Snapshot.Excluded, the status page's) changed.
			decode := func(b []byte) (healthResult, int, bool) {
				var entries []*api.ServiceEntry
				if json.NewDecoder(bytes.NewReader(b)).Decode(&entries) != nil {
					return healthResult{}, 0, false
				}
				return healthResult{ins: instances(q, entries), excl: excluded(q, entries)}, len(entries), true
			}
			var emits []refEmit[healthResult]
			sent, emits = refWatch(script, decode, sameHealth)
			if len(emits) != len(health) {
				t.Fatalf("%d snapshots, want %d", len(health), len(emits))
			}
			for i, e := range emits {
				want = append(want, e.reply)
				s := health[i]
				if !sameInstances(e.set.ins, s.Instances) || !slices.EqualFunc(e.set.excl, s.Excluded, Excluded.equal) || e.index != s.Index {
					t.Fatalf("snapshot %d: %v (excluded %v) at %d, want %v at %d", i, s.Instances, s.Excluded, s.Index, e.set, e.index)
				}
				for j, in := range s.Instances {
					if in.ID != in.Node+"/"+in.ServiceID || j > 0 && s.Instances[j-1].ID > in.ID || in.Weight == 0 {
						t.Fatalf("snapshot %d: instance %+v (sorted by ID, ID node/service, weight not 0)", i, in)
					}
				}
			}
		}
		if !slices.Equal(emitted, want) {
			t.Fatalf("emitted after replies %v, want %v", emitted, want)
		}
		ft.mu.Lock()
		got := slices.Clone(ft.indexes)
		ft.mu.Unlock()
		if !slices.Equal(got, sent) {
			t.Fatalf("queries sent indexes %v, want %v (Consul blocking-query rules)", got, sent)
		}
	})
}
