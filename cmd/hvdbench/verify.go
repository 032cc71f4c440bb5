package main

import (
	"fmt"
	"math"

	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// optimizerCase trains ResNet-50's parameters through the
// DistributedOptimizer; the yardstick has no such case.
const optimizerCase = "optimizer"

// patternPeriod is the period of pattern along a tensor.
const patternPeriod = 13

// pattern is a small integer per element of tensor i (0 to 12), so that
// sums over ranks are exact in float32. Along a tensor it counts up by one
// and wraps (next), which is how the loops below walk it: a division per
// element made checking every step's result cost several times the step.
func pattern(i, j int) float32 { return float32((i*7 + j) % patternPeriod) }

// next is the pattern of the element after one whose pattern is p.
func next(p float32) float32 {
	if p++; p == patternPeriod {
		return 0
	}
	return p
}

// fillRanked fills the tensors with rank-dependent small integers:
// pattern + rank + 1.
func fillRanked(ts []*tensor.Tensor, rank int) {
	for i, t := range ts {
		v := t.Float32s()
		p := pattern(i, 0)
		for j := range v {
			v[j] = p + float32(rank+1)
			p = next(p)
		}
	}
}

// sumOver is the Sum over n ranks of what fillRanked writes where the
// pattern is p: n·p + n(n+1)/2, an exact small integer.
func sumOver(n int) func(p float32) float64 {
	return func(p float32) float64 { return float64(n)*float64(p) + float64(n*(n+1)/2) }
}

// expectedSum is sumOver(n) at element j of tensor i.
func expectedSum(i, j, n int) float64 { return sumOver(n)(pattern(i, j)) }

// verify checks every element j of every tensor i against want(pattern(i,
// j)): equal when tol is 0, else within tol relative to want. It returns
// the number of elements checked, or an error naming the case, the tensor,
// the element, what it holds and what it should.
func verify(name string, ts []*tensor.Tensor, want func(p float32) float64, tol float64) (int, error) {
	n := 0
	for i, t := range ts {
		v := t.Float32s()
		p := pattern(i, 0)
		for j, got := range v {
			w := want(p)
			// Written so that NaN fails.
			if !(math.Abs(float64(got)-w) <= tol*math.Abs(w)) {
				return n, fmt.Errorf("case %s: tensor %d element %d: got %v, want %v", name, i, j, got, w)
			}
			p = next(p)
		}
		n += len(v)
	}
	return n, nil
}

// averageTol is the tolerance of an average over n ranks: exact when n is a
// power of two (the scaling by 1/n is then exact), else a few ulps.
func averageTol(n int) float64 {
	if n&(n-1) == 0 {
		return 0
	}
	return 0x1p-21
}

// optimizerBench is ResNet-50's shapes as the parameters of an SGD with
// momentum wrapped in the DistributedOptimizer over the runtime, on its
// default path (gradients reduced in buckets, each its own allocation). A step is what a
// training step does around backward: ZeroGrad, each gradient written and
// reported Ready in reverse order (as backward finishes them), then Step
// (wait for the averages and update).
func optimizerBench(rt *hvd.Runtime, ctl control, name string, counts []int) (benchCase, error) {
	rank, n := rt.Rank(), rt.Size()
	params := make([]optim.Param, len(counts))
	total := 0
	for i, cnt := range counts {
		params[i] = optim.Param{Name: fmt.Sprintf("%s.%d", name, i),
			Value: tensor.New(tensor.Float32, cnt), Grad: tensor.New(tensor.Float32, cnt)}
		total += cnt
	}
	sgd, err := optim.NewSGD(params, optim.SGDConfig{LR: 1e-3, Momentum: 0.9})
	if err != nil {
		return benchCase{}, err
	}
	coll, err := optim.FromRuntime(rt)
	if err != nil {
		return benchCase{}, err
	}
	dist, err := optim.NewDistributed(sgd, coll)
	if err != nil {
		return benchCase{}, err
	}
	// This rank's gradients, computed once: a step copies them in, as
	// cheaply as a gradient can be written. Rank r's are pattern + r, so
	// the average is pattern + (n-1)/2.
	src := make([][]float32, len(counts))
	for i, cnt := range counts {
		src[i] = make([]float32, cnt)
		for j := range src[i] {
			src[i][j] = pattern(i, j) + float32(rank)
		}
	}
	// Take the gradients from the optimizer: with FlatGradients(true) it
	// re-points each Param.Grad at its flat buffer.
	ps := dist.Params()
	backward := func() error {
		if err := dist.ZeroGrad(); err != nil {
			return err
		}
		for i := len(ps) - 1; i >= 0; i-- {
			copy(ps[i].Grad.Float32s(), src[i])
			if err := dist.Ready(ps[i]); err != nil {
				return err
			}
		}
		return nil
	}
	step := func() error {
		if err := backward(); err != nil {
			return err
		}
		return dist.Step()
	}
	grads := make([]*tensor.Tensor, len(ps))
	for i, p := range ps {
		grads[i] = p.Grad
	}
	half := float64(n-1) / 2
	// After every step the gradients hold the averages that Step applied
	// (the wrapped SGD, without weight decay, leaves them as they are).
	check := func() (int, error) {
		return verify(name+" (averaged gradients)", grads,
			func(p float32) float64 { return float64(p) + half }, averageTol(n))
	}
	final := func() (int, error) { return equalEverywhere(ctl, name, ps, total) }
	return benchCase{tensors: len(counts), bytes: float64(total * 4), step: step, check: check, final: final,
		close: func() { dist.Close() }}, nil
}

// equalEverywhere checks that the parameters ps (total elements) are
// equal on every rank: every rank applied the same averages from the same
// start (the max over ranks of v and of -v both give back this rank's).
// It returns the elements checked.
func equalEverywhere(ctl control, name string, ps []optim.Param, total int) (int, error) {
	flat := tensor.New(tensor.Float32, total)
	neg := tensor.New(tensor.Float32, total)
	fv, nv := flat.Float32s(), neg.Float32s()
	off := 0
	for _, p := range ps {
		for _, x := range p.Value.Float32s() {
			fv[off], nv[off] = x, -x
			off++
		}
	}
	if err := ctl.Allreduce(flat, tensor.Max); err != nil {
		return 0, err
	}
	if err := ctl.Allreduce(neg, tensor.Max); err != nil {
		return 0, err
	}
	off = 0
	for i, p := range ps {
		for j, x := range p.Value.Float32s() {
			if fv[off] != x || -nv[off] != x {
				return off, fmt.Errorf("case %s: parameter %d element %d differs across ranks: here %v, max %v, min %v",
					name, i, j, x, fv[off], -nv[off])
			}
			off++
		}
	}
	return off, nil
}
