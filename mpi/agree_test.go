package mpi

import (
	"errors"
	"fmt"
	"strings"
	"testing"

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
		n     int
		dt    tensor.DType
		local bool
	}
	tests := []struct {
		name     string
		ranks    []rank
		mismatch string // substring of the MismatchError, "" for none
		bad      int
	}{
		{"agree", []rank{{4, tensor.Float32, false}, {4, tensor.Float32, false}}, "", -1},
		{"count", []rank{{4, tensor.Float32, false}, {5, tensor.Float32, false}, {4, tensor.Float32, false}}, "element count differs across ranks (4 to 5)", -1},
		{"dtype", []rank{{4, tensor.Float32, false}, {4, tensor.Int64, false}}, "dtype differs across ranks (float32 to int64)", -1},
		{"local error wins over mismatch", []rank{{4, tensor.Float32, false}, {3, tensor.Float32, true}}, "", 1},
		{"lowest local error", []rank{{4, tensor.Float32, false}, {4, tensor.Float32, true}, {4, tensor.Float32, true}}, "", 1},
		{"rank 0 local error", []rank{{4, tensor.Float32, true}, {4, tensor.Float32, false}}, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			size := len(tt.ranks)
			fieldsOf := func(r rank) []field {
				return []field{collectiveField(opAllreduce), {name: "element count", v: int64(r.n)}, dtypeField(r.dt)}
			}
			var vs [][]int64
			for i, r := range tt.ranks {
				vs = append(vs, agreementVector(fieldsOf(r), r.local, i, size))
			}
			red := reduceMax(vs)
			// Every rank reads the same verdict from the same reduced vector.
			for i, r := range tt.ranks {
				mis, bad := verdict("allreduce", fieldsOf(r), red, size)
				if tt.mismatch == "" {
					if mis != nil {
						t.Fatalf("rank %d: unexpected mismatch %v", i, mis)
					}
				} else {
					var me *MismatchError
					if !errors.As(mis, &me) || !strings.Contains(mis.Error(), tt.mismatch) {
						t.Fatalf("rank %d: mismatch %v, want one mentioning %q", i, mis, tt.mismatch)
					}
					continue
				}
				if bad != tt.bad {
					t.Errorf("rank %d: bad rank %d, want %d", i, bad, tt.bad)
				}
			}
		})
	}
}

func TestCountFields(t *testing.T) {
	fs := countFields("counts", []int{1, 2, 3}, 3)
	if len(fs) != 3 || fs[2].v != 3 || fs[1].name != "counts[1]" {
		t.Errorf("countFields = %+v", fs)
	}
	// A vector of the wrong length still gives size fields (zeros), so
	// the agreement allreduce has the same length on every rank.
	fs = countFields("counts", []int{1, 2}, 3)
	if len(fs) != 3 || fs[0].v != 0 {
		t.Errorf("countFields with a short vector = %+v", fs)
	}
}

func TestMsgRoundTrip(t *testing.T) {
	long := strings.Repeat("x", 2*msgLen)
	tests := []struct {
		err      error
		mismatch bool
		text     string
	}{
		{fmt.Errorf("send buffer holds 3 elements"), false, "send buffer holds 3 elements"},
		{&MismatchError{Source: "mpi", Op: "alltoallv", Detail: "rank 1 sends 3"}, true, "rank 1 sends 3"},
		{errors.New(long), false, long[:msgLen-2]},
	}
	for _, tt := range tests {
		b := packMsg(tt.err)
		if len(b) != msgLen {
			t.Fatalf("packMsg gave %d bytes", len(b))
		}
		got := unpackMsg("op", 2, b)
		switch e := got.(type) {
		case *MismatchError:
			if !tt.mismatch || e.Detail != tt.text || e.Op != "op" {
				t.Errorf("unpack(%v) = %#v", tt.err, e)
			}
		case *ArgError:
			if tt.mismatch || e.Msg != tt.text || e.Rank != 2 {
				t.Errorf("unpack(%v) = %#v", tt.err, e)
			}
		default:
			t.Errorf("unpack(%v) = %T", tt.err, got)
		}
	}
}

func TestLocalChecks(t *testing.T) {
	if _, err := checkCounts("counts", []int{1, 2}, 3, maxCount); err == nil || !strings.Contains(err.Error(), "2 counts for 3 ranks") {
		t.Errorf("short counts: %v", err)
	}
	if _, err := checkCounts("counts", []int{1, -2}, 2, maxCount); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("negative count: %v", err)
	}
	if _, err := checkCounts("counts", []int{maxCount, 1}, 2, maxCount); err == nil || !strings.Contains(err.Error(), "more than one MPI call") {
		t.Errorf("huge counts: %v", err)
	}
	if n, err := checkCounts("counts", []int{1, 2}, 2, maxCount); err != nil || n != 3 {
		t.Errorf("good counts: %d, %v", n, err)
	}
	if err := checkTensor("send", nil, tensor.Invalid); err == nil {
		t.Error("nil tensor accepted")
	}
	dev := tensor.NewDevice(tensor.Float32, tensor.Device{Kind: tensor.GPU}, 0x1000, 4)
	if err := checkTensor("send", dev, tensor.Invalid); err == nil || !strings.Contains(err.Error(), "host memory only") {
		t.Errorf("device tensor: %v", err)
	}
	if err := checkTensor("receive", tensor.New(tensor.Int32, 2), tensor.Float32); err == nil {
		t.Error("dtype mismatch accepted")
	}
	if err := checkRoot(2, 2); err == nil {
		t.Error("root out of range accepted")
	}
}
