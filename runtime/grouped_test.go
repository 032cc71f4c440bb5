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

// groupInputs is rank's group for the grouped tests: a float32 tensor of
// rank+1 rows of 3, an int16 tensor of 2·rank rows of 2 (none on rank 0), a
// bool vector of rank%2+1 elements and a uint16 vector of 3 elements.
// Element j of rank q's tensor k is groupValue(k, q, j).
func groupInputs(rank int) []*tensor.Tensor {
	f := make([]float32, (rank+1)*3)
	for j := range f {
		f[j] = float32(groupValue(0, rank, j))
	}
	i16 := make([]int16, 2*rank*2)
	for j := range i16 {
		i16[j] = int16(groupValue(1, rank, j))
	}
	b := make([]bool, rank%2+1)
	for j := range b {
		b[j] = groupValue(2, rank, j)%2 == 1
	}
	u16 := make([]uint16, 3)
	for j := range u16 {
		u16[j] = uint16(groupValue(3, rank, j))
	}
	return []*tensor.Tensor{
		tensor.FromFloat32(f, rank+1, 3), tensor.FromInt16(i16, 2*rank, 2), tensor.FromBool(b), tensor.FromUint16(u16),
	}
}

func groupValue(k, q, j int) int64 {
	v := int64(1000*k + 100*q + j)
	if k == 1 {
		v = -v
	}
	return v
}

// values returns a host tensor's elements as int64 (bools as 0 and 1).
func values(t *tensor.Tensor) []int64 {
	var out []int64
	switch t.DType() {
	case tensor.Float32:
		for _, v := range t.Float32s() {
			out = append(out, int64(v))
		}
	case tensor.Float64:
		for _, v := range t.Float64s() {
			out = append(out, int64(v))
		}
	case tensor.Int16:
		for _, v := range t.Int16s() {
			out = append(out, int64(v))
		}
	case tensor.Uint16:
		for _, v := range t.Uint16s() {
			out = append(out, int64(v))
		}
	case tensor.Bool:
		for _, v := range t.Bools() {
			if v {
				out = append(out, 1)
			} else {
				out = append(out, 0)
			}
		}
	default:
		panic("values of " + t.DType().String())
	}
	return out
}

func TestGroupedAllgather(t *testing.T) {
	for _, size := range []int{2, 3} {
		c := startCluster(t, size, testConfig())
		c.each(t, func(r *Runtime, rank int) error { return checkGroupedAllgather(ctxT(t), r, rank, size) })
	}
}

// checkGroupedAllgather runs grouped allgathers on one rank of size.
func checkGroupedAllgather(ctx context.Context, r *Runtime, rank, size int) error {
	for step := range 2 { // twice: the second time through the response cache
		in := groupInputs(rank)
		outs, err := r.GroupedAllgather(ctx, in, "ga")
		if err != nil {
			return err
		}
		if len(outs) != len(in) {
			return fmt.Errorf("%d outputs for %d inputs", len(outs), len(in))
		}
		for k, out := range outs {
			var want []int64
			rows := 0
			for q := range size {
				qt := groupInputs(q)[k]
				rows += qt.Shape()[0]
				for j := range qt.Len() {
					v := groupValue(k, q, j)
					if k == 2 {
						v %= 2
					}
					want = append(want, v)
				}
			}
			if out.DType() != in[k].DType() || out.Shape()[0] != rows || !slices.Equal(out.Shape()[1:], in[k].Shape()[1:]) {
				return fmt.Errorf("step %d tensor %d: got %v, want %v with %d rows", step, k, out, in[k].DType(), rows)
			}
			if got := values(out); !slices.Equal(got, want) {
				return fmt.Errorf("step %d tensor %d: got %v, want %v", step, k, got, want)
			}
		}
	}
	// The asynchronous form, and a group of one.
	h, err := r.GroupedAllgatherAsync(groupInputs(rank)[:1], "one")
	if err != nil {
		return err
	}
	if err := h.Wait(ctx); err != nil {
		return err
	}
	if outs := h.Outputs(); len(outs) != 1 || outs[0].Shape()[0] != size*(size+1)/2 {
		return fmt.Errorf("group of one: %v", outs)
	}
	return nil
}

func TestGroupedReducescatter(t *testing.T) {
	for _, size := range []int{2, 3} {
		c := startCluster(t, size, testConfig())
		c.each(t, func(r *Runtime, rank int) error { return checkGroupedReducescatter(ctxT(t), r, rank, size) })
	}
}

// checkGroupedReducescatter runs grouped reducescatters on one rank of size.
func checkGroupedReducescatter(ctx context.Context, r *Runtime, rank, size int) error {
	rowsF := 2*size + 1 // not a multiple of size
	// Rank q contributes q+1 + element index to the float32 and int16
	// tensors; the bool tensor is true at element j on rank j%(size+1)
	// only, so the "or" is false at every (size+1)-th element.
	f := make([]float32, rowsF*2)
	for j := range f {
		f[j] = float32(rank + 1 + j)
	}
	i16 := make([]int16, size+2)
	for j := range i16 {
		i16[j] = int16(-(rank + 1) * (j + 1))
	}
	b := make([]bool, 2*size+3)
	for j := range b {
		b[j] = j%(size+1) == rank
	}
	in := []*tensor.Tensor{tensor.FromFloat32(f, rowsF, 2), tensor.FromInt16(i16), tensor.FromBool(b)}
	outs, err := r.GroupedReducescatter(ctx, in, "rs", Sum)
	if err != nil {
		return err
	}
	ranks := int64(size * (size + 1) / 2) // the sum of q+1 over the ranks
	for k, out := range outs {
		n := in[k].Shape()[0]
		lo := 0
		for q := range rank {
			lo += ReducescatterRows(n, size, q)
		}
		hi := lo + ReducescatterRows(n, size, rank)
		row := in[k].RowSize()
		var want []int64
		for j := lo * row; j < hi*row; j++ {
			switch k {
			case 0:
				want = append(want, ranks+int64(size*j))
			case 1:
				want = append(want, -ranks*int64(j+1))
			case 2:
				if j%(size+1) < size {
					want = append(want, 1)
				} else {
					want = append(want, 0)
				}
			}
		}
		if got := values(out); out.Shape()[0] != hi-lo || !slices.Equal(got, want) {
			return fmt.Errorf("tensor %d: got %v %v, want rows [%d, %d) %v", k, out, got, lo, hi, want)
		}
	}
	// Average, with a prescale, on the asynchronous form.
	h, err := r.GroupedReducescatterAsync([]*tensor.Tensor{fill(tensor.Float64, 5, float64(rank+1))}, "avg", Average, Prescale(2))
	if err != nil {
		return err
	}
	if err := h.Wait(ctx); err != nil {
		return err
	}
	if got, want := first(h.Outputs()[0]), float64(size+1); got != want {
		return fmt.Errorf("average: got %v, want %v", got, want)
	}
	return nil
}

func TestGroupedMismatchedSizesFailEveryRank(t *testing.T) {
	for _, size := range []int{2, 3} {
		c := startCluster(t, size, testConfig())
		c.each(t, func(r *Runtime, rank int) error { return checkGroupedMismatch(ctxT(t), r, rank) })
	}
}

// checkGroupedMismatch has rank 0 pass two tensors and the others three.
func checkGroupedMismatch(ctx context.Context, r *Runtime, rank int) error {
	n := 3
	if rank == 0 {
		n = 2
	}
	ts := make([]*tensor.Tensor, n)
	for i := range ts {
		ts[i] = fill(tensor.Float32, 4, 1)
	}
	var oe *OpError
	_, err := r.GroupedAllgather(ctx, ts, "mm")
	want := "Mismatched grouped ALLGATHER sizes: the ranks sent groups of 2 (rank 0), 3 (rank 1)"
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), want) || oe.Name != "allgather.mm" {
		return fmt.Errorf("allgather: got %v, want an OpError for allgather.mm with %q", err, want)
	}
	_, err = r.GroupedReducescatter(ctx, ts, "mm", Sum)
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), "Mismatched grouped REDUCESCATTER sizes") {
		return fmt.Errorf("reducescatter: got %v", err)
	}
	// Nothing is left behind: the same names work once the sizes agree.
	if _, err := r.GroupedAllgather(ctx, ts[:2], "mm"); err != nil {
		return fmt.Errorf("after the mismatch: %v", err)
	}
	if _, err := r.GroupedReducescatter(ctx, ts[:2], "mm", Sum); err != nil {
		return fmt.Errorf("after the mismatch: %v", err)
	}
	return nil
}

func TestGroupedMemberMismatchAndArguments(t *testing.T) {
	c := startCluster(t, 2, testConfig())
	c.each(t, func(r *Runtime, rank int) error {
		// Member 2's dtype differs across ranks: Horovod's message, on
		// every rank, for that member.
		dt := tensor.Int16
		if rank == 1 {
			dt = tensor.Uint16
		}
		_, err := r.GroupedAllgather(ctxT(t), []*tensor.Tensor{fill(tensor.Float32, 2, 1), tensor.New(dt, 2)}, "dt")
		var oe *OpError
		if !errors.As(err, &oe) || oe.Name != "allgather.dt_2of2" ||
			!strings.Contains(oe.Message, "Mismatched data types: One rank had type int16, but another rank had type uint16.") &&
				!strings.Contains(oe.Message, "Mismatched data types: One rank had type uint16, but another rank had type int16.") {
			return fmt.Errorf("dtype mismatch: %v", err)
		}
		return nil
	})
	r := c.rts[0]
	if _, err := r.GroupedAllgatherAsync(nil, "none"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("empty group: %v", err)
	}
	if _, err := r.GroupedReducescatterAsync([]*tensor.Tensor{fill(tensor.Float32, 2, 1)}, "min", Min); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), reducescatterText) {
		t.Errorf("reducescatter with Min: %v", err)
	}
	if _, err := r.GroupedReducescatterAsync([]*tensor.Tensor{tensor.New(tensor.Bool, 2)}, "avg", Average); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("average of bool: %v", err)
	}
}
