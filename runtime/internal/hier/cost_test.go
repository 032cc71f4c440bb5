package hier

import "testing"

// TestCrossNodeBytes checks the cost model against values computed by hand
// for an allreduce and an allgather of 100 MiB.
func TestCrossNodeBytes(t *testing.T) {
	const mib = 1 << 20
	const b = 100 * mib
	tests := []struct {
		name      string
		node      []int
		allreduce Traffic // in MiB
		allgather Traffic
	}{
		// 2 nodes of 2: ring edges 1->2 and 3->0 cross; each rank sends
		// 2*3/4*b (allreduce) or 3/4*b (allgather) on its edge. The cross
		// step runs among 2 ranks: 2*(2-1)*b, (2-1)*b.
		{"2x2", []int{0, 0, 1, 1}, Traffic{300, 200}, Traffic{150, 100}},
		// 3 nodes of 2: edges 1->2, 3->4, 5->0 cross; 3*2*5/6*b and
		// 3*5/6*b flat; 2*(3-1)*b and (3-1)*b hierarchical.
		{"3x2", []int{0, 0, 1, 1, 2, 2}, Traffic{500, 400}, Traffic{250, 200}},
		// 2 nodes of 3: edges 2->3 and 5->0; 2*2*5/6*b and 2*5/6*b.
		{"2x3", []int{0, 0, 0, 1, 1, 1}, Traffic{1000.0 / 3, 200}, Traffic{500.0 / 3, 100}},
		// Alternating nodes: every edge crosses.
		{"nodes[0 1 0 1]", []int{0, 1, 0, 1}, Traffic{600, 200}, Traffic{300, 100}},
		// One rank per node: the hierarchical algorithm is the ring.
		{"4x1", []int{0, 1, 2, 3}, Traffic{600, 600}, Traffic{300, 300}},
		// Uneven nodes: edges 2->3, 3->4, 5->0; 3*2*5/6*b flat.
		{"3+1+2", []int{0, 0, 0, 1, 2, 2}, Traffic{500, 400}, Traffic{250, 200}},
		{"1x4", []int{0, 0, 0, 0}, Traffic{0, 0}, Traffic{0, 0}},
		{"1x1", []int{0}, Traffic{0, 0}, Traffic{0, 0}},
	}
	near := func(got, want float64) bool { return got-want < 1e-6 && want-got < 1e-6 }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := NewLayout(tt.node)
			if err != nil {
				t.Fatal(err)
			}
			ar, ag := CrossNodeBytes(l, b), AllgatherCrossNodeBytes(l, b)
			if !near(ar.Flat/mib, tt.allreduce.Flat) || !near(ar.Hier/mib, tt.allreduce.Hier) {
				t.Errorf("allreduce: %v MiB flat, %v MiB hier; want %v, %v", ar.Flat/mib, ar.Hier/mib, tt.allreduce.Flat, tt.allreduce.Hier)
			}
			if !near(ag.Flat/mib, tt.allgather.Flat) || !near(ag.Hier/mib, tt.allgather.Hier) {
				t.Errorf("allgather: %v MiB flat, %v MiB hier; want %v, %v", ag.Flat/mib, ag.Hier/mib, tt.allgather.Flat, tt.allgather.Hier)
			}
		})
	}
	if (CrossNodeBytes(Layout{}, b) != Traffic{}) || (AllgatherCrossNodeBytes(Layout{}, b) != Traffic{}) {
		t.Error("the empty layout has traffic")
	}
}
