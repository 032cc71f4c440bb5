package runtime

import (
	"math"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/timeline"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// adasum performs an Adasum allreduce of each tensor of resp: every rank's
// vector is gathered and combined pairwise up a binary tree (ranks r and
// r+1, then pairs of pairs, ...), so every rank computes the same result:
//
//	adasum(a, b) = (1 - a·b/(2‖a‖²))·a + (1 - a·b/(2‖b‖²))·b
//
// with dot products and norms in float64, per tensor (layer), and a
// coefficient of 1 when a squared norm is below sqrt(DBL_MIN). The rank
// count is a power of two (checked at enqueue).
//
// Float16 and bfloat16 tensors are widened to float32 (exactly), combined in
// float32 as a float32 tensor would be, postscaled, and rounded to their own
// precision once at the end, as Horovod's CPU Adasum computes half precision
// in float32.
func (p *performer) adasum(resp *wire.Response, ents []*entry) error {
	start := time.Now()
	for _, e := range ents {
		if e.out != e.in {
			copy(e.out.Bytes(), e.in.Bytes())
		}
		tensor.ScaleTensor(e.out, resp.Prescale)
		n := e.out.Len()
		all := tensor.New(e.out.DType(), n*p.size)
		for r := range p.counts {
			p.counts[r] = n
		}
		if err := p.com.Allgatherv(e.out, all, p.counts); err != nil {
			return err
		}
		switch e.out.DType() {
		case tensor.Float32:
			copy(e.out.Float32s(), adasumTree(all.Float32s(), n, p.size))
			tensor.ScaleTensor(e.out, resp.Postscale)
		case tensor.Float64:
			copy(e.out.Float64s(), adasumTree(all.Float64s(), n, p.size))
			tensor.ScaleTensor(e.out, resp.Postscale)
		case tensor.Float16, tensor.BFloat16:
			adasumHalf(e.out, all, n, p.size, resp.Postscale)
		}
	}
	p.activity(timeline.MPIAdasum, start, time.Now())
	return nil
}

// adasumHalf is adasum's float16 and bfloat16 case: all holds size vectors
// of n half-precision elements; the combination runs in float32 and out gets
// the result times postscale, rounded once.
func adasumHalf(out, all *tensor.Tensor, n, size int, postscale float64) {
	wide := make([]float32, n*size)
	if all.DType() == tensor.Float16 {
		tensor.Float16ToFloat32(wide, tensor.View[tensor.Float16Bits](all))
	} else {
		tensor.BFloat16ToFloat32(wide, tensor.View[tensor.BFloat16Bits](all))
	}
	res := adasumTree(wide, n, size)
	tensor.ScaleTensor(tensor.FromFloat32(res), postscale)
	if out.DType() == tensor.Float16 {
		tensor.Float32ToFloat16(tensor.View[tensor.Float16Bits](out), res)
	} else {
		tensor.Float32ToBFloat16(tensor.View[tensor.BFloat16Bits](out), res)
	}
}

// adasumTree combines size vectors of n elements laid out contiguously in
// all (modified in place) and returns the result (the first vector).
func adasumTree[T float32 | float64](all []T, n, size int) []T {
	for step := 1; step < size; step *= 2 {
		for r := 0; r+step < size; r += 2 * step {
			adasumPair(all[r*n:(r+1)*n], all[(r+step)*n:(r+step+1)*n])
		}
	}
	return all[:n]
}

// adasumPair combines b into a with the Adasum formula: a becomes
// (1 - a·b/(2‖a‖²))·a + (1 - a·b/(2‖b‖²))·b. It reduces to a+b for
// orthogonal vectors and to a for equal ones.
func adasumPair[T float32 | float64](a, b []T) {
	var dot, na, nb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		dot += x * y
		na += x * x
		nb += y * y
	}
	tiny := math.Sqrt(2.2250738585072014e-308) // sqrt(DBL_MIN)
	ca, cb := 1.0, 1.0
	if na >= tiny {
		ca = 1 - dot/(2*na)
	}
	if nb >= tiny {
		cb = 1 - dot/(2*nb)
	}
	for i := range a {
		a[i] = T(ca*float64(a[i]) + cb*float64(b[i]))
	}
}
