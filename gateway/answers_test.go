package gateway

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
)

// TestAnswersTableInREADME: the README's table of the gateway's own
// answers ("What the gateway answers itself") names exactly the reasons of
// answer.All, each with its status, and the gRPC status of every answer
// sent as a response is the one the README's mapping gives its HTTP status.
func TestAnswersTableInREADME(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "### What the gateway answers itself")
	if start < 0 {
		t.Fatal("README has no answers table")
	}
	var rows []string // the table: the first run of "|" lines after the heading
	for _, line := range strings.Split(text[start:], "\n") {
		if strings.HasPrefix(line, "|") {
			rows = append(rows, line)
		} else if len(rows) > 0 {
			break
		}
	}
	reasonCell := regexp.MustCompile("`([a-z][a-z0-9_]+)`")
	countedAs := regexp.MustCompile("counted (?:as|against the backend as) (?:[1-5]xx )?`([a-z][a-z0-9_]+)`")
	status := regexp.MustCompile(`\b([1-5][0-9][0-9])\b`)
	readme := map[string][]string{} // reason → statuses in its row
	for _, row := range rows {
		cells := strings.Split(row, "|")
		if len(cells) != 5 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") || strings.TrimSpace(cells[1]) == "situation" {
			continue
		}
		var reasons []string
		for _, m := range reasonCell.FindAllStringSubmatch(cells[3], -1) {
			reasons = append(reasons, m[1])
		}
		for _, m := range countedAs.FindAllStringSubmatch(cells[2], -1) {
			reasons = append(reasons, m[1])
		}
		var statuses []string
		for _, m := range status.FindAllStringSubmatch(cells[2], -1) {
			statuses = append(statuses, m[1])
		}
		for _, r := range reasons {
			readme[r] = append(readme[r], statuses...)
		}
	}
	if len(readme) < 20 {
		t.Fatalf("parsed only %d reasons from the README table: %v", len(readme), readme)
	}
	for _, a := range answer.All {
		statuses, ok := readme[a.Reason]
		if !ok {
			t.Errorf("answer %q (%d) is not in the README table", a.Reason, a.Status)
			continue
		}
		switch want := a.Status; {
		case a.Form == answer.Reset, want == answer.StatusClientClosed:
		case a.Form == answer.StreamError && slices.Contains(statuses, "400") || len(statuses) == 0 && a.Form == answer.StreamError:
		case !slices.Contains(statuses, strconv.Itoa(want)):
			t.Errorf("answer %q: status %d, the README says %v", a.Reason, want, statuses)
		}
		if a.Form == answer.Response && a.GRPC != answer.GRPCOfHTTP(a.Status) && a.Status != 403 {
			t.Errorf("answer %q: gRPC status %d, the README's mapping of %d gives %d", a.Reason, a.GRPC, a.Status, answer.GRPCOfHTTP(a.Status))
		}
	}
	for r := range readme {
		if _, ok := answer.Of(r); !ok {
			t.Errorf("the README table names %q, which is no answer of the gateway's (answer.All)", r)
		}
	}
}
