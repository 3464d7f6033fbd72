package main

import (
	"strings"
	"testing"
)

func TestParsePerfReport(t *testing.T) {
	out := `# Samples: 2K of event 'cpu-clock:pppH'
#
# Children      Self  Symbol
# ........  ........  ......
#
    34.46%     0.13%  [.] github.com/quic-go/quic-go/http3.(*RawServerConn).HandleRequestStream
    21.06%     0.00%  [k] entry_SYSCALL_64_after_hwframe
     8.16%     0.00%  [.] runtime.morestack.abi0

`
	rows := parsePerfReport(out)
	if len(rows) != 3 {
		t.Fatalf("%d rows: %+v", len(rows), rows)
	}
	if r := rows[0]; r.children != 34.46 || r.self != 0.13 || r.kernel || r.sym != "github.com/quic-go/quic-go/http3.(*RawServerConn).HandleRequestStream" {
		t.Errorf("row 0: %+v", r)
	}
	if !rows[1].kernel {
		t.Errorf("row 1 should be kernel: %+v", rows[1])
	}
	self := parsePerfReport("     8.79%  [k] finish_task_switch.isra.0\n     2.49%  [.] runtime.mallocgcSmallScanNoHeader\n")
	if len(self) != 2 || self[1].self != 2.49 || self[1].children != 2.49 || self[1].sym != "runtime.mallocgcSmallScanNoHeader" {
		t.Errorf("self rows: %+v", self)
	}
	sum := perfSummary([]perfLine{{children: 8.1, sym: "runtime.newstack"}}, self, 1)
	if !strings.Contains(sum, "goroutine stack growth (runtime.newstack)    8.1") || !strings.Contains(sum, "[kernel] finish_task_switch.isra.0") ||
		strings.Contains(sum, "mallocgcSmallScanNoHeader") {
		t.Errorf("summary:\n%s", sum)
	}
}
