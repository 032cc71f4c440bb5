package agree

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/tensor"
)

func TestDisagreement(t *testing.T) {
	f32 := func(n int) Call { return Call{Kind: Allreduce, DType: tensor.Float32, N: n, Op: tensor.Sum} }
	tests := []struct {
		name  string
		k     Kind
		calls []Call
		want  string
	}{
		{"agree", Allreduce, []Call{f32(4), f32(4)}, ""},
		{"count", Allreduce, []Call{f32(4), f32(4), f32(5)}, "element counts 4 (rank 0) and 5 (rank 2)"},
		{"kind first", Allreduce, []Call{f32(4), {Kind: Bcast, N: 5}}, "rank 0 called allreduce, rank 1 called bcast"},
		{"dtype", Allreduce, []Call{f32(4), {Kind: Allreduce, DType: tensor.Int64, N: 4, Op: tensor.Sum}}, "dtypes float32 (rank 0) and int64 (rank 1)"},
		{"counts", Allgatherv, []Call{{Kind: Allgatherv, Counts: []int{1, 2}}, {Kind: Allgatherv, Counts: []int{1, 3}}}, "counts [1 2] (rank 0) and [1 3] (rank 1)"},
		{"roots", Bcast, []Call{{Kind: Bcast, Root: 0}, {Kind: Bcast, Root: 1}}, "roots 0 (rank 0) and 1 (rank 1)"},
		{"alltoallv", Alltoallv, []Call{
			{Kind: Alltoallv, Counts: []int{1, 2}, RecvCounts: []int{1, 1}},
			{Kind: Alltoallv, Counts: []int{1, 1}, RecvCounts: []int{1, 1}},
		}, "rank 0 sends 2 elements to rank 1, which expects 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Disagreement(tt.k, len(tt.calls), func(r int) Call { return tt.calls[r] }); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestVector checks that a Call survives its Vector, as the MPI binding
// gathers it, and that counts of another length travel as zeros.
func TestVector(t *testing.T) {
	c := Call{Kind: Alltoallv, DType: tensor.Int32, Op: tensor.Max, N: 7, Root: 1, Counts: []int{1, 2, 3}, RecvCounts: []int{4, 5, 6}}
	v := c.Vector(3)
	if len(v) != VectorLen(3) {
		t.Fatalf("vector of %d integers, want %d", len(v), VectorLen(3))
	}
	if got := CallOf(v, 3); !reflect.DeepEqual(got, c) {
		t.Errorf("CallOf(Vector) = %+v, want %+v", got, c)
	}
	short := Call{Kind: Allgatherv, Counts: []int{1}}
	if got := CallOf(short.Vector(2), 2); !reflect.DeepEqual(got.Counts, []int{0, 0}) {
		t.Errorf("short counts came back as %v", got.Counts)
	}
}

func TestCheck(t *testing.T) {
	f32 := func(n int) *tensor.Tensor { return tensor.New(tensor.Float32, n) }
	dev := tensor.NewDevice(tensor.Float32, tensor.Device{Kind: tensor.GPU}, 0x1000, 4)
	tests := []struct {
		name string
		a    Args
		want string // in the error; "" for none
	}{
		{"allreduce", Args{Kind: Allreduce, Size: 2, Send: f32(3), Op: tensor.Sum}, ""},
		{"nil buffer", Args{Kind: Allreduce, Size: 2, Op: tensor.Sum}, "nil buffer tensor"},
		{"device buffer", Args{Kind: Bcast, Size: 2, Send: dev}, "host tensors only"},
		{"op on dtype", Args{Kind: Allreduce, Size: 2, Send: f32(1), Op: tensor.BitAnd}, "reduction BitAnd is not defined on float32"},
		{"root", Args{Kind: Bcast, Size: 2, Send: f32(1), Root: 2}, "root 2 out of range for 2 ranks"},
		{"gatherv away from the root", Args{Kind: Gatherv, Rank: 1, Size: 2, Send: f32(1), Counts: []int{1, 1}}, ""},
		{"gatherv on the root", Args{Kind: Gatherv, Size: 2, Send: f32(1), Counts: []int{1, 1}}, "nil receive tensor"},
		{"counts length", Args{Kind: Allgatherv, Size: 3, Send: f32(1), Recv: f32(3), Counts: []int{1, 2}}, "2 counts for 3 ranks"},
		{"negative count", Args{Kind: Allgatherv, Size: 2, Send: f32(1), Recv: f32(3), Counts: []int{1, -2}}, "negative count -2 for rank 1"},
		{"send size", Args{Kind: Allgatherv, Size: 2, Send: f32(2), Recv: f32(3), Counts: []int{1, 2}}, "send buffer holds 2 elements, want 1"},
		{"recv size", Args{Kind: Allgatherv, Size: 2, Send: f32(1), Recv: f32(2), Counts: []int{1, 2}}, "receive buffer holds 2 elements, want at least 3"},
		{"dtypes", Args{Kind: Allgatherv, Size: 2, Send: f32(1), Recv: tensor.New(tensor.Int32, 3), Counts: []int{1, 2}}, "send dtype float32 differs from receive dtype int32"},
		{"alltoallv receive counts", Args{Kind: Alltoallv, Size: 2, Send: f32(2), Recv: f32(1), Counts: []int{1, 1}, RecvCounts: []int{1, 1}}, "receive buffer holds 1 elements, want at least 2"},
		{"reducescatter", Args{Kind: ReduceScatter, Rank: 1, Size: 2, Send: f32(3), Recv: f32(2), Counts: []int{1, 2}, Op: tensor.Sum}, ""},
		{"reducescatter own block", Args{Kind: ReduceScatter, Rank: 1, Size: 2, Send: f32(3), Recv: f32(1), Counts: []int{1, 2}, Op: tensor.Sum}, "receive buffer holds 1 elements, want at least 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.a.Check()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
