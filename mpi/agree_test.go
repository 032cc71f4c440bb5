package mpi

import (
	"errors"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/internal/agree"
	"github.com/gohorovod/gohorovod/tensor"
)

// reduceMax simulates the agreement allreduce (MAX) over the ranks' vectors.
func reduceMax(vs [][]int64) []int64 {
	out := append([]int64(nil), vs[0]...)
	for _, v := range vs[1:] {
		for i := range out {
			out[i] = max(out[i], v[i])
		}
	}
	return out
}

func TestVerdict(t *testing.T) {
	type rank struct {
		kind  agree.Kind
		n     int
		dt    tensor.DType
		local bool
	}
	ar := agree.Allreduce
	tests := []struct {
		name     string
		ranks    []rank
		disagree bool
		bad      int
	}{
		{"agree", []rank{{ar, 4, tensor.Float32, false}, {ar, 4, tensor.Float32, false}}, false, -1},
		{"count", []rank{{ar, 4, tensor.Float32, false}, {ar, 5, tensor.Float32, false}, {ar, 4, tensor.Float32, false}}, true, -1},
		{"dtype", []rank{{ar, 4, tensor.Float32, false}, {ar, 4, tensor.Int64, false}}, true, -1},
		{"local error wins over mismatch", []rank{{ar, 4, tensor.Float32, false}, {ar, 3, tensor.Float32, true}}, false, 1},
		{"other collective wins over local error", []rank{{agree.Bcast, 4, tensor.Float32, false}, {ar, 4, tensor.Float32, true}}, true, -1},
		{"lowest local error", []rank{{ar, 4, tensor.Float32, false}, {ar, 4, tensor.Float32, true}, {ar, 4, tensor.Float32, true}}, false, 1},
		{"rank 0 local error", []rank{{ar, 4, tensor.Float32, true}, {ar, 4, tensor.Float32, false}}, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			size := len(tt.ranks)
			var vs [][]int64
			k := 0
			for i, r := range tt.ranks {
				fs := fields(agree.Call{Kind: r.kind, N: r.n, DType: r.dt}, size)
				k = len(fs)
				vs = append(vs, agreementVector(fs, r.local, false, i, size))
			}
			red := reduceMax(vs)
			// Every rank reads the same verdict from the same reduced vector.
			for i := range tt.ranks {
				disagree, bad := verdict(k, red, size)
				if disagree != tt.disagree || bad != tt.bad {
					t.Errorf("rank %d: verdict %v, %d; want %v, %d", i, disagree, bad, tt.disagree, tt.bad)
				}
			}
		})
	}
}

// TestVerdictFound checks that one rank's own finding that the ranks
// disagree (an alltoallv's counts) is heard by every rank.
func TestVerdictFound(t *testing.T) {
	fs := fields(agree.Call{Kind: agree.Alltoallv, DType: tensor.Int32}, 3)
	var vs [][]int64
	for r := range 3 {
		vs = append(vs, agreementVector(fs, false, r == 2, r, 3))
	}
	if disagree, bad := verdict(len(fs), reduceMax(vs), 3); !disagree || bad != -1 {
		t.Errorf("verdict %v, %d; want a disagreement", disagree, bad)
	}
}

// TestFieldsLength checks that a counts vector of the wrong length still
// gives a vector of the same length, so that the agreement allreduce has
// the same length on every rank.
func TestFieldsLength(t *testing.T) {
	good := fields(agree.Call{Kind: agree.Allgatherv, Counts: []int{1, 2, 3}}, 3)
	short := fields(agree.Call{Kind: agree.Allgatherv, Counts: []int{1, 2}}, 3)
	if len(good) != len(short) || good[len(good)-1] != 3 {
		t.Errorf("fields %v and %v", good, short)
	}
}

// TestDisagreementWords checks that the MPI binding tells a disagreement
// in internal/agree's words, from the ranks' gathered calls.
func TestDisagreementWords(t *testing.T) {
	calls := []agree.Call{
		{Kind: agree.Allreduce, DType: tensor.Float32, N: 4},
		{Kind: agree.Allreduce, DType: tensor.Float32, N: 4},
		{Kind: agree.Allreduce, DType: tensor.Float32, N: 5},
	}
	var all []int64
	for _, c := range calls {
		all = append(all, c.Vector(len(calls))...)
	}
	err := disagreement("allreduce", agree.Allreduce, all, len(calls))
	want := "mpi: allreduce: arguments disagree across ranks: element counts 4 (rank 0) and 5 (rank 2)"
	var me *MismatchError
	if !errors.As(err, &me) || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}

func TestMsgRoundTrip(t *testing.T) {
	long := strings.Repeat("x", 2*msgLen)
	tests := []struct {
		err  error
		text string
	}{
		{errors.New("send buffer holds 3 elements"), "send buffer holds 3 elements"},
		{errors.New(long), long[:msgLen-1]},
	}
	for _, tt := range tests {
		b := packMsg(tt.err)
		if len(b) != msgLen {
			t.Fatalf("packMsg gave %d bytes", len(b))
		}
		var ae *ArgError
		if got := unpackMsg("op", 2, b); !errors.As(got, &ae) || ae.Msg != tt.text || ae.Rank != 2 || ae.Op != "op" {
			t.Errorf("unpack(%v) = %#v", tt.err, got)
		}
	}
}
