// Package consultest starts a real Consul dev agent for tests.
//
// The binary is $CONSUL_BIN or the one built and cached by scripts/consul.sh
// (Consul v1.14.11; see shared/design/consul-for-tests.md). Each agent listens
// on free loopback ports, keeps its state in memory (-dev) and logs to a file
// in its temporary directory; that log is printed when the test fails.
//
// Per test (simplest; startup takes about a second):
//
//	a := consultest.Start(t)
//	a.RegisterTTL(t, "web-1", "web", "127.0.0.1", 8080, nil, nil)
//
// With TLS (HTTPS only, client certificates required; see [WithTLS]):
//
//	a := consultest.Start(t, consultest.WithTLS())
//	f := a.TLS() // f.CAFile, f.ClientCert, f.ClientKey for the client under test
//
// One agent for the whole package, shared by tests that use distinct service
// names (tests that stop, restart or reconfigure Consul start their own):
//
//	var consul *consultest.Agent
//
//	func TestMain(m *testing.M) {
//		a, stop, err := consultest.StartMain()
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		consul = a
//		code := m.Run()
//		stop(code != 0)
//		os.Exit(code)
//	}
package consultest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

const (
	startTimeout   = 60 * time.Second // leader election normally takes ~1-3 s
	portAttempts   = 5                // fresh port sets tried when a port was taken
	logTailOnError = 64 << 10         // bytes of the agent log printed on failure
	httpTimeout    = time.Second      // of one leader poll
)

// Option configures [Start] and [StartMain].
type Option func(*options)

type options struct {
	config string
	token  string
	tls    bool
}

// WithConfig adds an HCL configuration file to the agent, e.g. to enable ACLs:
//
//	acl { enabled = true default_policy = "deny" tokens { initial_management = "<uuid>" } }
func WithConfig(hcl string) Option { return func(o *options) { o.config = hcl } }

// WithToken sets the ACL token used by [Agent.Client] and the helpers (the
// initial management token of an ACL-enabled agent).
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// Agent is a running (or stopped) Consul dev agent on fixed loopback ports.
type Agent struct {
	bin, dir, logPath, cfgPath, node, token string
	tlsCfgPath                              string    // WithTLS: the tls and ports configuration
	tls                                     *TLSFiles // nil without WithTLS
	ports                                   ports
	tb                                      testing.TB // nil for StartMain agents
	client                                  *api.Client

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
}

type ports struct{ http, server, serfLAN, serfWAN int }

// Start starts a dev agent, waits until it has elected itself leader and
// stops it when the test ends. It fails the test if Consul cannot start.
func Start(t testing.TB, opts ...Option) *Agent {
	t.Helper()
	a, err := start(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	a.tb = t
	t.Cleanup(func() {
		a.Stop()
		if t.Failed() {
			t.Logf("consul agent log %s (tail):\n%s", a.logPath, a.logTail())
		}
	})
	return a
}

// StartMain starts an agent outside any test, for TestMain. stop kills it,
// prints the log tail to stderr when dumpLog is true and removes its files.
func StartMain(opts ...Option) (a *Agent, stop func(dumpLog bool), err error) {
	dir, err := os.MkdirTemp("", "consultest-")
	if err != nil {
		return nil, nil, fmt.Errorf("consultest: %w", err)
	}
	if a, err = start(dir, opts); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return a, func(dumpLog bool) {
		a.Stop()
		if dumpLog {
			fmt.Fprintf(os.Stderr, "consul agent log %s (tail):\n%s\n", a.logPath, a.logTail())
		}
		os.RemoveAll(dir)
	}, nil
}

func start(dir string, opts []Option) (*Agent, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	a := &Agent{bin: bin, dir: dir, logPath: filepath.Join(dir, "consul.log"), token: o.token}
	if o.config != "" {
		a.cfgPath = filepath.Join(dir, "extra.hcl")
		if err := os.WriteFile(a.cfgPath, []byte(o.config), 0o600); err != nil {
			return nil, fmt.Errorf("consultest: %w", err)
		}
	}
	if o.tls {
		if a.tls, err = makePKI(bin, dir); err != nil {
			return nil, err
		}
		a.tlsCfgPath = filepath.Join(dir, "tls.hcl")
	}
	for attempt := 1; ; attempt++ {
		if a.ports, err = pickPorts(); err != nil {
			return nil, err
		}
		if a.tls != nil {
			// The HTTPS port is the one picked for HTTP, which is off.
			if err := os.WriteFile(a.tlsCfgPath, []byte(tlsConfigHCL(a.tls, a.ports.http)), 0o600); err != nil {
				return nil, fmt.Errorf("consultest: %w", err)
			}
		}
		a.node = "consultest-" + strconv.Itoa(a.ports.http)
		err = a.launch()
		if err == nil || !errors.Is(err, errPortTaken) || attempt == portAttempts {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w\n--- consul log %s (tail):\n%s", err, a.logPath, a.logTail())
	}
	a.client, err = api.NewClient(a.apiConfig(a.token))
	if err != nil {
		a.Stop()
		return nil, fmt.Errorf("consultest: client: %w", err)
	}
	if err := a.waitToken(); err != nil {
		a.Stop()
		return nil, err
	}
	return a, nil
}

// waitToken waits, with ACLs on, until the leader has created the initial
// management token: it does so a little after its election, and calls made
// before get 403 "ACL not found".
func (a *Agent) waitToken() error {
	if a.token == "" || a.cfgPath == "" {
		return nil
	}
	deadline := time.Now().Add(startTimeout)
	for {
		_, _, err := a.client.ACL().TokenReadSelf(nil)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consultest: the ACL token never became usable: %w", err)
		}
		time.Sleep(20 * time.Millisecond) // polling a process we do not control
	}
}

var errPortTaken = errors.New("consultest: a port was taken")

// launch starts the process on a.ports and waits for a leader.
func (a *Agent) launch() error {
	logf, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("consultest: %w", err)
	}
	defer logf.Close() // the child has its own descriptor
	args := []string{"agent", "-dev", "-bind", "127.0.0.1", "-client", "127.0.0.1", "-node", a.node,
		"-server-port", strconv.Itoa(a.ports.server),
		"-serf-lan-port", strconv.Itoa(a.ports.serfLAN), "-serf-wan-port", strconv.Itoa(a.ports.serfWAN),
		"-grpc-port", "-1", "-grpc-tls-port", "-1", "-dns-port", "-1"}
	if a.tls != nil {
		// Flags win over files: the HTTPS port is set in tls.hcl only.
		args = append(args, "-http-port", "-1", "-config-file", a.tlsCfgPath)
	} else {
		args = append(args, "-http-port", strconv.Itoa(a.ports.http), "-https-port", "-1")
	}
	if a.cfgPath != "" {
		args = append(args, "-config-file", a.cfgPath)
	}
	fmt.Fprintf(logf, "=== consultest: %s %s\n", a.bin, strings.Join(args, " "))
	cmd := exec.Command(a.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1")
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("consultest: start %s: %w", a.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	a.mu.Lock()
	a.cmd, a.exited = cmd, exited
	a.mu.Unlock()

	if err := a.waitLeader(exited); err != nil {
		a.Stop()
		if strings.Contains(a.logTail(), "address already in use") {
			return fmt.Errorf("%w: %v", errPortTaken, err)
		}
		return err
	}
	return nil
}

// waitLeader polls /v1/status/leader until it names this agent's server port
// (not another test's agent that won a port race for the HTTP port), the
// process exits or startTimeout passes.
func (a *Agent) waitLeader(exited <-chan struct{}) error {
	hc, err := a.httpClient()
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		// A dev agent leads its own one-node cluster: the leader is our server
		// port, which also proves the HTTP port answering is ours.
		if leader(hc, a.URL()) == net.JoinHostPort("127.0.0.1", strconv.Itoa(a.ports.server)) {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("consultest: consul exited before electing a leader (log %s)", a.logPath)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consultest: no leader after %s (log %s)", startTimeout, a.logPath)
		}
	}
}

func leader(hc *http.Client, base string) string {
	resp, err := hc.Get(base + "/v1/status/leader")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var s string
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&s) != nil {
		return ""
	}
	return s
}

// pickPorts chooses the ports of a new agent; a variable so tests can force a
// collision.
var pickPorts = freePorts

// freePorts picks four distinct loopback ports free for TCP, at random below
// the ephemeral range; the serf ports are also free for UDP. Another process may still take one before Consul
// binds it: launch detects that and start retries with new ports.
func freePorts() (ports, error) {
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	pick := func(udp bool) (int, error) {
		for i := range 120 {
			// Below Linux's ephemeral range (32768-60999): no outgoing
			// connection and no ":0" listener of another test is ever given
			// such a port, so Restart finds the agent's ports free again.
			// The last tries fall back to ":0".
			addr := "127.0.0.1:0"
			if i < 100 {
				addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(20000+rand.IntN(12000)))
			}
			l, err := net.Listen("tcp", addr)
			if err != nil && i < 100 {
				continue
			}
			if err != nil {
				return 0, fmt.Errorf("consultest: free port: %w", err)
			}
			held = append(held, l)
			p := l.Addr().(*net.TCPAddr).Port
			if !udp {
				return p, nil
			}
			if u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
				held = append(held, u)
				return p, nil
			}
		}
		return 0, errors.New("consultest: no port free for both TCP and UDP")
	}
	var p ports
	var err error
	for _, f := range []struct {
		dst *int
		udp bool
	}{{&p.http, false}, {&p.server, false}, {&p.serfLAN, true}, {&p.serfWAN, true}} {
		if *f.dst, err = pick(f.udp); err != nil {
			return p, err
		}
	}
	return p, nil
}

// Addr returns host:port of the HTTP API (its HTTPS port for an agent
// started [WithTLS]).
func (a *Agent) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(a.ports.http)) }

// Node returns the agent's node name.
func (a *Agent) Node() string { return a.node }

// LogPath returns the agent's log file (all runs, restarts included).
func (a *Agent) LogPath() string { return a.logPath }

// Client returns a consul/api client for the agent (with the WithToken token).
// It stays valid across Restart: the ports do not change.
func (a *Agent) Client() *api.Client { return a.client }

// Stop kills the agent's process group and waits for it. Stopping a stopped
// agent does nothing. In dev mode all state is lost.
func (a *Agent) Stop() {
	a.mu.Lock()
	cmd, exited := a.cmd, a.exited
	a.cmd = nil
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// Restart stops the agent if needed and starts it again on the same ports,
// waiting for a leader. Dev-mode state is gone: services must be registered
// again and the Raft index starts low again (lower than before). It fails the
// test given to Start, or panics for a StartMain agent.
func (a *Agent) Restart() {
	a.Stop()
	var err error
	for range 3 { // the old sockets may linger for a moment
		if err = a.launch(); err == nil || !errors.Is(err, errPortTaken) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err == nil {
		return
	}
	err = fmt.Errorf("consultest: restart: %w\n%s", err, a.logTail())
	if a.tb == nil {
		panic(err)
	}
	a.tb.Fatal(err)
}

// logTail returns the end of the agent log.
func (a *Agent) logTail() string {
	b, err := os.ReadFile(a.logPath)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(b) > logTailOnError {
		b = b[len(b)-logTailOnError:]
	}
	return string(b)
}
