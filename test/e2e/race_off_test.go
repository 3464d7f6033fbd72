//go:build !race

package e2e

// raceEnabled: the test binary runs under the race detector (much slower).
const raceEnabled = false
