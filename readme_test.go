package impulseagent

import (
	"os"
	"regexp"
	"testing"
)

// TestREADMEGoVersion: the Go version the README asks for is go.mod's go
// line (the minimum the toolchain enforces).
func TestREADMEGoVersion(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	req := regexp.MustCompile(`Requirements: Go (\S+?)[ ,]`).FindSubmatch(readme)
	if req == nil || string(req[1]) != string(m[1]) {
		t.Errorf("README asks for Go %q, go.mod says go %s", req, m[1])
	}
}
