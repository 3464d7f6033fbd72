package gateway

import (
	"net/http"

	"sync"
	"sync/atomic"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
)

// maxWorkers bounds the pool of warm proxy goroutines; requests beyond it
// run on their own stream goroutine.
const maxWorkers = 512

// workers runs requests on long-lived goroutines whose stacks have already
// grown to what the proxy path needs. quic-go starts a fresh goroutine per
// request stream, and growing its stack through the HTTP/1.1 and HTTP/2
// client code cost about 12% of the agent's CPU in a profile under load;
// a hand-off costs two channel operations.
type workers struct {
	jobs    chan *job
	running atomic.Int32
	wg      sync.WaitGroup
	stop    chan struct{}
	once    sync.Once
}

type job struct {
	g        *Gateway
	listener string
	w        http.ResponseWriter
	r        *http.Request
	refused  answer.Answer
	done     chan any // the handler's panic value, or nil
}

var jobPool = sync.Pool{New: func() any { return &job{done: make(chan any, 1)} }}

func newWorkers() *workers {
	return &workers{jobs: make(chan *job), stop: make(chan struct{})}
}

// run serves one request on a warm worker, starting one when all are busy
// and fewer than maxWorkers exist; a panic (http.ErrAbortHandler: reset the
// stream) is re-raised on the calling goroutine, where quic-go recovers it.
func (ws *workers) run(g *Gateway, listener string, w http.ResponseWriter, r *http.Request, refused answer.Answer) {
	if r.ProtoMajor == 1 || r.Method == http.MethodConnect {
		// net/http serves an HTTP/1.1 connection's requests one after
		// another on one goroutine, whose stack has grown already: a
		// hand-off would only add two goroutine switches.
		g.serve(listener, w, r, refused)
		return
	}
	j := jobPool.Get().(*job)
	j.g, j.listener, j.w, j.r, j.refused = g, listener, w, r, refused
	select {
	case ws.jobs <- j:
	default:
		if !ws.spawn() {
			jobPool.Put(j)
			g.serve(listener, w, r, refused)
			return
		}
		select {
		case ws.jobs <- j:
		case <-ws.stop:
			jobPool.Put(j)
			g.serve(listener, w, r, refused)
			return
		}
	}
	p := <-j.done
	j.g, j.w, j.r = nil, nil, nil
	jobPool.Put(j)
	if p != nil {
		panic(p)
	}
}

// spawn starts one more worker unless the pool is full or stopped.
func (ws *workers) spawn() bool {
	select {
	case <-ws.stop:
		return false
	default:
	}
	for {
		n := ws.running.Load()
		if n >= maxWorkers {
			return false
		}
		if ws.running.CompareAndSwap(n, n+1) {
			break
		}
	}
	ws.wg.Add(1)
	go ws.loop()
	return true
}

func (ws *workers) loop() {
	defer ws.wg.Done()
	defer ws.running.Add(-1)
	for {
		select {
		case <-ws.stop:
			return
		case j := <-ws.jobs:
			j.done <- serveRecovered(j)
		}
	}
}

func serveRecovered(j *job) (p any) {
	defer func() { p = recover() }()
	j.g.serve(j.listener, j.w, j.r, j.refused)
	return nil
}

// close stops idle workers and waits for busy ones to finish their request.
func (ws *workers) close() {
	ws.once.Do(func() { close(ws.stop) })
	ws.wg.Wait()
}
