package nn

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/tensor"
)

// This file holds what the in-memory and the multi-process tests share: a
// plain two-pass reference of batch normalisation on a whole batch, the
// deterministic batches, and the check of a sync layer on one rank
// against the reference on the concatenated batch.

// ref is single-process batch normalisation of a whole batch in float64,
// written out plainly (two passes, no shortcuts), and its backward.
type ref struct {
	n, c             int
	mean, vb, invstd []float64 // vb: the biased variance
	xhat, y          []float64
}

func refForward(x []float64, n, c int, w, b []float64, eps float64) *ref {
	r := &ref{n: n, c: c, mean: make([]float64, c), vb: make([]float64, c), invstd: make([]float64, c),
		xhat: make([]float64, n*c), y: make([]float64, n*c)}
	for j := range c {
		for i := range n {
			r.mean[j] += x[i*c+j]
		}
		r.mean[j] /= float64(n)
		for i := range n {
			d := x[i*c+j] - r.mean[j]
			r.vb[j] += d * d
		}
		r.vb[j] /= float64(n)
		r.invstd[j] = 1 / math.Sqrt(r.vb[j]+eps)
		for i := range n {
			r.xhat[i*c+j] = (x[i*c+j] - r.mean[j]) * r.invstd[j]
			r.y[i*c+j] = r.xhat[i*c+j]*w[j] + b[j]
		}
	}
	return r
}

// backward returns dx, dweight and dbias for dy.
func (r *ref) backward(dy, w []float64) (dx, dw, db []float64) {
	n, c := r.n, r.c
	dx, dw, db = make([]float64, n*c), make([]float64, c), make([]float64, c)
	for j := range c {
		for i := range n {
			db[j] += dy[i*c+j]
			dw[j] += dy[i*c+j] * r.xhat[i*c+j]
		}
		for i := range n {
			dx[i*c+j] = w[j] * r.invstd[j] * (dy[i*c+j] - db[j]/float64(n) - r.xhat[i*c+j]*dw[j]/float64(n))
		}
	}
	return dx, dw, db
}

// batch returns step's deterministic global batch of rows rows of c
// features (per-feature offsets and scales, so that the statistics are
// far from 0 and 1), the upstream gradient dy, and the weight and bias
// the test sets.
func batch(seed uint64, step, rows, c int) (x, dy, w, b []float64) {
	r := rand.New(rand.NewPCG(seed, uint64(step)))
	x, dy = make([]float64, rows*c), make([]float64, rows*c)
	for i := range x {
		j := i % c
		x[i] = float64(j) - 2 + (1+0.5*float64(j))*r.NormFloat64()
		dy[i] = r.NormFloat64()
	}
	w, b = make([]float64, c), make([]float64, c)
	for j := range c {
		w[j], b[j] = 0.5+r.Float64(), r.NormFloat64()
	}
	return x, dy, w, b
}

func sum(xs []int) int {
	s := 0
	for _, v := range xs {
		s += v
	}
	return s
}

func convert[T, U Float](xs []U) []T {
	out := make([]T, len(xs))
	for i, v := range xs {
		out[i] = T(v)
	}
	return out
}

// closeTo checks |got-want| <= tol·max(1, |want|) elementwise.
func closeTo[T Float](what string, got []T, want []float64, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i, g := range got {
		if d := math.Abs(float64(g) - want[i]); !(d <= tol*max(1, math.Abs(want[i]))) {
			return fmt.Errorf("%s[%d] = %.12g, want %.12g (difference %.3g, tolerance %.3g relative)", what, i, float64(g), want[i], d, tol)
		}
	}
	return nil
}

// Tolerances of the checks against the float64 reference, relative to
// max(1, |value|). The bound asked for is 1e-6 relative: float32 layers,
// which round inputs, outputs and gradients to 24 bits (their statistics
// are still summed in float64), meet it with about 1.5e-7 at worst;
// float64 layers agree to about 1e-12, checked at 1e-9.
const (
	tol64 = 1e-9
	tol32 = 1e-6
)

func tolOf[T Float]() float64 {
	var z T
	if _, ok := any(z).(float32); ok {
		return tol32
	}
	return tol64
}

// syncCheck runs, on rank of size ranks, a sync layer named name over coll
// for steps steps; at each step the ranks hold counts[0], counts[1], ...
// rows of the step's global batch (in rank order). It checks, every
// step, that the rank's output and dx are its rows of the reference's on
// the concatenated batch, and that the weight and bias gradients it adds
// sum, over the ranks, to the reference's (summed here with one more
// allreduce); and at the end that the running statistics follow PyTorch's
// formulas over the steps' global statistics. All within tolOf[T].
func syncCheck[T Float](ctx context.Context, coll optim.Collectives, name string, rank int, counts []int, steps int, seed uint64) error {
	const c = 5
	const momentum = 0.3
	if len(counts) != coll.Size() {
		return fmt.Errorf("%d counts for %d ranks", len(counts), coll.Size())
	}
	bn, err := NewBatchNorm[T](name, c, Sync(coll), Momentum(momentum))
	if err != nil {
		return err
	}
	tol := tolOf[T]()
	lo := sum(counts[:rank])
	n, total := counts[rank], sum(counts)
	rm, rv := make([]float64, c), make([]float64, c)
	for j := range rv {
		rv[j] = 1
	}
	for s := range steps {
		x, dy, w, b := batch(seed, s, total, c)
		copy(tensor.View[T](bn.weight.Value), convert[T](w))
		copy(tensor.View[T](bn.bias.Value), convert[T](b))
		optim.ZeroGrads(bn.Params())
		// The inputs as the layer sees them (rounded to T).
		xt := convert[T](x)
		x = convert[float64](xt)
		want := refForward(x, total, c, w, b, DefaultEps)
		dx, dw, db := want.backward(dy, w)
		for j := range c {
			rm[j] = (1-momentum)*rm[j] + momentum*want.mean[j]
			rv[j] = (1-momentum)*rv[j] + momentum*want.vb[j]*float64(total)/float64(total-1)
		}

		y, err := bn.ForwardContext(ctx, xt[lo*c:(lo+n)*c], n)
		if err != nil {
			return fmt.Errorf("step %d: Forward: %w", s, err)
		}
		if err := closeTo(fmt.Sprint("step ", s, " y"), y, want.y[lo*c:(lo+n)*c], tol); err != nil {
			return err
		}
		gx, err := bn.BackwardContext(ctx, convert[T](dy[lo*c:(lo+n)*c]))
		if err != nil {
			return fmt.Errorf("step %d: Backward: %w", s, err)
		}
		if err := closeTo(fmt.Sprint("step ", s, " dx"), gx, dx[lo*c:(lo+n)*c], tol); err != nil {
			return err
		}
		// Σ over ranks of the parameter gradients.
		g := tensor.New(tensor.Float64, 2*c)
		copy(g.Float64s(), convert[float64](tensor.View[T](bn.weight.Grad)))
		copy(g.Float64s()[c:], convert[float64](tensor.View[T](bn.bias.Grad)))
		h, err := coll.AllreduceAsync(g, name+".test.grads", optim.Sum, 1, 1)
		if err != nil {
			return err
		}
		if err := h.Wait(ctx); err != nil {
			return err
		}
		if err := closeTo(fmt.Sprint("step ", s, " Σ dweight"), g.Float64s()[:c], dw, tol); err != nil {
			return err
		}
		if err := closeTo(fmt.Sprint("step ", s, " Σ dbias"), g.Float64s()[c:], db, tol); err != nil {
			return err
		}
	}
	if err := closeTo("running mean", bn.RunningMean(), rm, tol); err != nil {
		return err
	}
	if err := closeTo("running var", bn.RunningVar(), rv, tol); err != nil {
		return err
	}
	// Evaluation mode: the running statistics, no communication.
	bn.SetTraining(false)
	x, _, _, _ := batch(seed, steps, total, c)
	xt := convert[T](x)
	y, err := bn.ForwardContext(ctx, xt[lo*c:(lo+n)*c], n)
	if err != nil {
		return fmt.Errorf("eval Forward: %w", err)
	}
	w, b := convert[float64](tensor.View[T](bn.weight.Value)), convert[float64](tensor.View[T](bn.bias.Value))
	want := make([]float64, n*c)
	for i := range n {
		for j := range c {
			v := float64(xt[(lo+i)*c+j])
			want[i*c+j] = (v-rm[j])/math.Sqrt(rv[j]+DefaultEps)*w[j] + b[j]
		}
	}
	return closeTo("eval y", y, want, tol)
}
