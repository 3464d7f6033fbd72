package impulseagent

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestFuzzTargetsListed: GNUmakefile's FUZZ_TARGETS (what make fuzz and CI
// run) names every func Fuzz* of the repository, in the package that
// declares it, and the README's fuzzing table has a row for each.
func TestFuzzTargetsListed(t *testing.T) {
	var found []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range regexp.MustCompile(`(?m)^func (Fuzz\w+)\(\w+ \*testing\.F\)`).FindAllSubmatch(src, -1) {
			found = append(found, "./"+filepath.ToSlash(filepath.Dir(path))+":"+string(m[1]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile("GNUmakefile")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)FUZZ_TARGETS := \\\n(.*?)\n\n`).FindSubmatch(mk)
	if block == nil {
		t.Fatal("GNUmakefile has no FUZZ_TARGETS block")
	}
	listed := strings.Fields(strings.ReplaceAll(string(block[1]), "\\", ""))
	slices.Sort(found)
	sorted := slices.Sorted(slices.Values(listed))
	if !slices.Equal(found, sorted) {
		t.Errorf("FUZZ_TARGETS %q, want every fuzz target %q", sorted, found)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		name := f[strings.LastIndex(f, ":")+1:]
		if !regexp.MustCompile("(?m)^\\| `" + name + "` \\|").Match(readme) {
			t.Errorf("README's fuzzing table has no row for %s", name)
		}
	}
}
