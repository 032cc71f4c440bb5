package runtime

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/tensor"
)

// adasumInput is rank's vector for the half-precision Adasum tests: values
// in (-1, 1) that differ per rank and element (so the pairs are neither
// parallel nor orthogonal), rounded to dt, and their exact float32 values.
func adasumInput(dt tensor.DType, rank, n int) (*tensor.Tensor, []float32) {
	wide := make([]float32, n)
	for i := range wide {
		wide[i] = float32(math.Sin(float64(7*i+13*rank+1)) * (1 + 0.25*float64(rank)))
	}
	t := tensor.New(dt, n)
	if dt == tensor.Float16 {
		tensor.Float32ToFloat16(tensor.View[tensor.Float16Bits](t), wide)
		tensor.Float16ToFloat32(wide, tensor.View[tensor.Float16Bits](t))
	} else {
		tensor.Float32ToBFloat16(tensor.View[tensor.BFloat16Bits](t), wide)
		tensor.BFloat16ToFloat32(wide, tensor.View[tensor.BFloat16Bits](t))
	}
	return t, wide
}

// halfValues returns a half-precision tensor's values as float64.
func halfValues(t *tensor.Tensor) []float64 {
	wide := make([]float32, t.Len())
	if t.DType() == tensor.Float16 {
		tensor.Float16ToFloat32(wide, tensor.View[tensor.Float16Bits](t))
	} else {
		tensor.BFloat16ToFloat32(wide, tensor.View[tensor.BFloat16Bits](t))
	}
	out := make([]float64, len(wide))
	for i, v := range wide {
		out[i] = float64(v)
	}
	return out
}

// checkAdasumHalf checks a half-precision Adasum result got (for size ranks
// with adasumInput's vectors, scaled by post) two ways:
//
//   - exactly: it is the float32 Adasum of the same (widened) inputs, scaled
//     and rounded once to dt, which is what the runtime promises;
//   - against the float64 Adasum of the same inputs, within
//     u·|ref| + 2^-20·max|ref| + 2^-24, where u is dt's unit roundoff
//     (2^-11 for float16, 2^-8 for bfloat16) and bounds the final rounding;
//     the float32 work before it rounds log2(size) ≤ 2 times at 2^-24
//     relative, with coefficients below 2 for these vectors, so 2^-20 of the
//     largest magnitude is ample; 2^-24 is float16's smallest subnormal. A
//     wrong formula, a missing rank or a double rounding shows well beyond it.
func checkAdasumHalf(dt tensor.DType, got *tensor.Tensor, size, n int, post float64) error {
	all32 := make([]float32, 0, n*size)
	all64 := make([]float64, 0, n*size)
	for q := range size {
		_, w := adasumInput(dt, q, n)
		all32 = append(all32, w...)
		for _, v := range w {
			all64 = append(all64, float64(v))
		}
	}
	res32 := adasumTree(all32, n, size)
	for i := range res32 {
		res32[i] *= float32(post)
	}
	want := tensor.New(dt, n)
	if dt == tensor.Float16 {
		tensor.Float32ToFloat16(tensor.View[tensor.Float16Bits](want), res32)
	} else {
		tensor.Float32ToBFloat16(tensor.View[tensor.BFloat16Bits](want), res32)
	}
	if string(got.Bytes()) != string(want.Bytes()) {
		return fmt.Errorf("%v adasum of %d ranks: got %v, want the float32 result rounded once, %v",
			dt, size, halfValues(got), halfValues(want))
	}
	ref := adasumTree(all64, n, size)
	u := math.Ldexp(1, -11)
	if dt == tensor.BFloat16 {
		u = math.Ldexp(1, -8)
	}
	big := 0.0
	for i := range ref {
		ref[i] *= post
		big = max(big, math.Abs(ref[i]))
	}
	for i, v := range halfValues(got) {
		if tol := u*math.Abs(ref[i]) + math.Ldexp(big, -20) + math.Ldexp(1, -24); math.Abs(v-ref[i]) > tol {
			return fmt.Errorf("%v adasum element %d = %v, float64 reference %v (tolerance %v)", dt, i, v, ref[i], tol)
		}
	}
	return nil
}

func TestAdasumHalfPrecision(t *testing.T) {
	for _, size := range []int{2, 4} {
		c := startCluster(t, size, testConfig())
		for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
			for _, n := range []int{1, 37} {
				name := fmt.Sprintf("half.%v.%d", dt, n)
				c.each(t, func(r *Runtime, rank int) error {
					in, _ := adasumInput(dt, rank, n)
					out, err := r.Allreduce(ctxT(t), in, name, Adasum)
					if err != nil {
						return err
					}
					if err := checkAdasumHalf(dt, out, size, n, 1); err != nil {
						return err
					}
					// In place, with a postscale: one rounding at the end.
					if err := r.AllreduceInPlace(ctxT(t), in, name+".post", Adasum, Postscale(1.0/3)); err != nil {
						return err
					}
					return checkAdasumHalf(dt, in, size, n, 1.0/3)
				})
			}
		}
	}
}

func TestAdasumRefusesIntegers(t *testing.T) {
	c := startCluster(t, 2, testConfig())
	for _, dt := range []tensor.DType{tensor.Int32, tensor.Int16, tensor.Bool} {
		_, err := c.rts[0].AllreduceAsync(tensor.New(dt, 2), "int", Adasum)
		if err == nil || !strings.Contains(err.Error(), "Adasum supports float16, bfloat16, float32 and float64 tensors, not "+dt.String()) {
			t.Errorf("%v: %v", dt, err)
		}
	}
}
