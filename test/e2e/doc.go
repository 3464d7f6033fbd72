// Package e2e holds impulse-agent's end-to-end tests: they build the
// impulse-agent binary once, run it as a child process against real HTTP/1.1
// and HTTP/2-over-TLS backends (and, for discovery, a real Consul dev agent
// from test/consultest), and talk to it over HTTP/3 and its control API, as a
// user would. Everything listens on loopback ports picked by the kernel.
//
//	go test -race -count=1 ./test/e2e/
//
// The package has no non-test code besides this file.
package e2e
