package main

import "testing"

func TestIdleReclaimer(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name    string
		armed   bool
		perTick []uint64 // bytes allocated during each tick
		want    []bool   // reclaimed at that tick
	}{
		{"quiet after start reclaims once", true, []uint64{0, 0, 0}, []bool{true, false, false}},
		{"busy then quiet reclaims once", false, []uint64{50 * mib, 9 * mib, 100, 100}, []bool{false, false, true, false}},
		{"steady moderate traffic never reclaims", false, []uint64{2 * mib, 3 * mib, 2 * mib}, []bool{false, false, false}},
		{"each busy period earns one reclaim", false, []uint64{5 * mib, 0, 5 * mib, 0, 0}, []bool{false, true, false, true, false}},
		{"between thresholds keeps the busy mark", false, []uint64{5 * mib, 2 * mib, 2 * mib, 0}, []bool{false, false, false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var total uint64
			reclaims := 0
			r := &idleReclaimer{allocs: func() uint64 { return total }, reclaim: func() { reclaims++ }, armed: tt.armed}
			for i, d := range tt.perTick {
				total += d
				before := reclaims
				if got := r.tick(); got != tt.want[i] || (reclaims > before) != tt.want[i] {
					t.Fatalf("tick %d (%d bytes): reclaimed %v, want %v", i, d, got, tt.want[i])
				}
			}
		})
	}
}
