package wire

import (
	"slices"
	"testing"

	"github.com/gohorovod/gohorovod/tensor"
)

func TestReduceOpKernelAndPostscale(t *testing.T) {
	for op, want := range map[ReduceOp]tensor.ReduceOp{Average: tensor.Sum, Sum: tensor.Sum, AdasumOp: tensor.Sum,
		Min: tensor.Min, Max: tensor.Max, Product: tensor.Product} {
		if got := op.Kernel(); got != want {
			t.Errorf("%v.Kernel() = %v, want %v", op, got, want)
		}
	}
	if got := (&Response{Op: Average, Postscale: 2}).PostscaleOver(4); got != 0.5 {
		t.Errorf("Average over 4 with postscale 2: %v", got)
	}
	if got := (&Response{Op: Sum, Postscale: 2}).PostscaleOver(4); got != 2 {
		t.Errorf("Sum over 4 with postscale 2: %v", got)
	}
	if got := IntShape([]int64{3, 1, 7}); !slices.Equal(got, []int{3, 1, 7}) {
		t.Errorf("IntShape: %v", got)
	}
}
