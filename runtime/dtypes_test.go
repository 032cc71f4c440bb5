package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/tensor"
)

// newDTypes are the element types added after the first ones: Horovod's tests
// broadcast, allgather and alltoall them.
var newDTypes = []tensor.DType{tensor.Int16, tensor.Uint16, tensor.Bool}

// dtypeTensor returns a tensor of dt and shape whose element j is
// v(j) (bools: its parity; uint16: v(j) mod 2^16).
func dtypeTensor(dt tensor.DType, v func(j int) int64, shape ...int) *tensor.Tensor {
	t := tensor.New(dt, shape...)
	for j := range t.Len() {
		switch dt {
		case tensor.Int16:
			t.Int16s()[j] = int16(v(j))
		case tensor.Uint16:
			t.Uint16s()[j] = uint16(v(j))
		case tensor.Bool:
			t.Bools()[j] = v(j)&1 == 1
		}
	}
	return t
}

// expectValues is dtypeTensor's values as values() reads them back.
func expectValues(dt tensor.DType, v func(j int) int64, n int) []int64 {
	out := make([]int64, n)
	for j := range out {
		switch dt {
		case tensor.Int16:
			out[j] = int64(int16(v(j)))
		case tensor.Uint16:
			out[j] = int64(uint16(v(j)))
		case tensor.Bool:
			out[j] = v(j) & 1
		}
	}
	return out
}

// val is element j of rank q's data in the new-dtype tests: signed, beyond
// int8's range, and distinct per rank.
func val(q, j int) int64 { return int64(-300*q + 7*j + q) }

// checkNewDTypes runs broadcast, allgather, alltoall and allreduce of the
// new dtypes on one rank of size; every rank calls it.
func checkNewDTypes(ctx context.Context, r *Runtime, rank, size int) error {
	for _, dt := range newDTypes {
		// Broadcast from the last rank.
		root := size - 1
		b, err := r.Broadcast(ctx, dtypeTensor(dt, func(j int) int64 { return val(rank, j) }, 2, 3), root, "bc."+dt.String())
		if err != nil {
			return err
		}
		if got, want := values(b), expectValues(dt, func(j int) int64 { return val(root, j) }, 6); !slices.Equal(got, want) || b.DType() != dt {
			return fmt.Errorf("broadcast %v: got %v %v, want %v", dt, b, got, want)
		}
		// Allgather of rank+1 rows of 2.
		g, err := r.Allgather(ctx, dtypeTensor(dt, func(j int) int64 { return val(rank, j) }, rank+1, 2), "ag."+dt.String())
		if err != nil {
			return err
		}
		var want []int64
		for q := range size {
			want = append(want, expectValues(dt, func(j int) int64 { return val(q, j) }, (q+1)*2)...)
		}
		if got := values(g); !slices.Equal(got, want) || g.Shape()[0] != size*(size+1)/2 {
			return fmt.Errorf("allgather %v: got %v %v, want %v", dt, g, got, want)
		}
		// Alltoall: rank q sends d+1 rows to rank d; element j of the rows
		// q sends d is val(q*8+d, j).
		splits := make([]int, size)
		var send []int64
		for d := range size {
			splits[d] = d + 1
			send = append(send, expectValues(dt, func(j int) int64 { return val(rank*8+d, j) }, d+1)...)
		}
		a, recvSplits, err := r.Alltoall(ctx, dtypeTensor(dt, func(j int) int64 { return send[j] }, len(send)), splits, "a2a."+dt.String())
		if err != nil {
			return err
		}
		want = want[:0]
		for q := range size {
			want = append(want, expectValues(dt, func(j int) int64 { return val(q*8+rank, j) }, rank+1)...)
		}
		if got := values(a); !slices.Equal(got, want) || len(recvSplits) != size || recvSplits[0] != rank+1 {
			return fmt.Errorf("alltoall %v: got %v %v splits %v, want %v", dt, a, got, recvSplits, want)
		}
	}
	// Allreduce of the 16-bit integers: rank q contributes q+2 (negated on
	// odd elements for int16) at every element.
	for _, dt := range []tensor.DType{tensor.Int16, tensor.Uint16} {
		for _, op := range []ReduceOp{Sum, Min, Max, Product, Average} {
			in := dtypeTensor(dt, func(j int) int64 {
				v := int64(rank + 2)
				if dt == tensor.Int16 && j%2 == 1 {
					v = -v
				}
				return v
			}, 4)
			out, err := r.Allreduce(ctx, in, fmt.Sprintf("ar.%v.%v", dt, op), op)
			if err != nil {
				return err
			}
			for j, got := range values(out) {
				var w int64
				switch op {
				case Sum:
					w = int64(size*(size+3)) / 2
				case Average:
					w = int64(size*(size+3)) / 2 / int64(size) // truncated: sums are positive here
				case Min:
					w = 2
				case Max:
					w = int64(size + 1)
				case Product:
					w = 1
					for q := range size {
						w *= int64(q + 2)
					}
				}
				if dt == tensor.Int16 && j%2 == 1 {
					switch op {
					case Sum, Average:
						w = -w
					case Min:
						w = -int64(size + 1)
					case Max:
						w = -2
					case Product:
						if size%2 == 1 {
							w = -w
						}
					}
				}
				if got != w {
					return fmt.Errorf("allreduce %v %v element %d: got %d, want %d", op, dt, j, got, w)
				}
			}
		}
	}
	// Bool: element j is true on rank j%(size+1) only (and on no rank for
	// j%(size+1) == size). Sum and Max are "or", Min and Product "and".
	for _, op := range []ReduceOp{Sum, Max, Min, Product} {
		and := op == Min || op == Product
		n := 2*(size+1) + 1
		in := dtypeTensor(tensor.Bool, func(j int) int64 {
			on := j%(size+1) == rank
			if on != and {
				return 1
			}
			return 0
		}, n)
		out, err := r.Allreduce(ctx, in, "ar.bool."+op.String(), op)
		if err != nil {
			return err
		}
		for j, got := range values(out) {
			w := int64(0)
			if hit := j%(size+1) < size; hit != and {
				w = 1
			}
			if got != w {
				return fmt.Errorf("allreduce %v of bool element %d: got %d, want %d", op, j, got, w)
			}
		}
	}
	if _, err := r.AllreduceAsync(tensor.New(tensor.Bool, 2), "ar.bool.avg", Average); !errors.Is(err, ErrInvalidArgument) {
		return fmt.Errorf("average of bool: %v", err)
	}
	// A dtype mismatch names the types as Horovod does.
	dt := tensor.Int16
	if rank == 0 {
		dt = tensor.Bool
	}
	_, err := r.Broadcast(ctx, tensor.New(dt, 3), 0, "mismatch")
	var oe *OpError
	if !errors.As(err, &oe) || !strings.Contains(oe.Message, "Mismatched data types: One rank had type") ||
		!strings.Contains(oe.Message, "bool") || !strings.Contains(oe.Message, "int16") {
		return fmt.Errorf("dtype mismatch: %v", err)
	}
	return nil
}

func TestNewDTypes(t *testing.T) {
	for _, size := range []int{2, 3} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := startCluster(t, size, testConfig())
			c.each(t, func(r *Runtime, rank int) error { return checkNewDTypes(ctxT(t), r, rank, size) })
		})
	}
}
