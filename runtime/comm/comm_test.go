package comm_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/tensor"
)

// TestCasesAreDistinct guards the suite itself: names are unique (so that
// -run selects the same case on every rank) and every case can run.
func TestCasesAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range commtest.Cases() {
		if seen[c.Name] {
			t.Errorf("duplicate case name %q", c.Name)
		}
		seen[c.Name] = true
		if c.Run == nil || c.Name == "" || strings.ContainsAny(c.Name, " \t") {
			t.Errorf("malformed case %q", c.Name)
		}
	}
}

func TestSumOffsets(t *testing.T) {
	tests := []struct {
		counts []int
		sum    int
		offs   []int
	}{
		{nil, 0, []int{}},
		{[]int{3}, 3, []int{0}},
		{[]int{1, 0, 2, 5}, 8, []int{0, 1, 1, 3}},
	}
	for _, tt := range tests {
		if got := comm.Sum(tt.counts); got != tt.sum {
			t.Errorf("Sum(%v) = %d, want %d", tt.counts, got, tt.sum)
		}
		if got := comm.Offsets(tt.counts); !slices.Equal(got, tt.offs) {
			t.Errorf("Offsets(%v) = %v, want %v", tt.counts, got, tt.offs)
		}
	}
}

func TestCheckLocal(t *testing.T) {
	f32 := func(n int) *tensor.Tensor { return tensor.New(tensor.Float32, n) }
	tests := []struct {
		name     string
		size     int
		counts   []int
		send     *tensor.Tensor
		sendWant int
		recv     *tensor.Tensor
		recvWant int
		wantErr  string
	}{
		{"ok", 2, []int{1, 2}, f32(1), 1, f32(3), 3, ""},
		{"recv larger is fine", 2, []int{1, 2}, f32(1), 1, f32(9), 3, ""},
		{"no send check", 2, []int{1, 2}, nil, -1, f32(3), 3, ""},
		{"counts length", 3, []int{1, 2}, f32(1), 1, f32(3), 3, "2 counts for 3 ranks"},
		{"negative count", 2, []int{1, -2}, f32(1), 1, f32(3), 3, "negative count -2 for rank 1"},
		{"send size", 2, []int{1, 2}, f32(2), 1, f32(3), 3, "send buffer holds 2 elements, want 1"},
		{"recv size", 2, []int{1, 2}, f32(1), 1, f32(2), 3, "receive buffer holds 2 elements, want at least 3"},
		{"dtypes", 2, []int{1, 2}, f32(1), 1, tensor.New(tensor.Int32, 3), 3, "send dtype float32 differs from receive dtype int32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := comm.CheckLocal("op", tt.size, tt.counts, tt.send, tt.sendWant, tt.recv, tt.recvWant)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestMismatchErrorText(t *testing.T) {
	err := &comm.MismatchError{Source: "comm", Op: "allreduce", Detail: "element counts 4 (rank 0) and 5 (rank 1)"}
	want := "comm: allreduce: arguments disagree across ranks: element counts 4 (rank 0) and 5 (rank 1)"
	if got := fmt.Sprint(err); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
