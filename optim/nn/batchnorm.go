package nn

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/tensor"
)

// Float is the element type of a layer's inputs, outputs and parameters.
type Float interface{ float32 | float64 }

// Defaults of the options, PyTorch's.
const (
	DefaultEps      = 1e-5 // added to the variance before its square root
	DefaultMomentum = 0.1  // weight of the batch in the running statistics
)

// Errors of the layers, returned wrapped with the layer's name and the
// details.
var (
	// ErrConfig: a constructor was given a bad name, feature count or
	// option.
	ErrConfig = errors.New("nn: bad layer configuration")
	// ErrInput: Forward or Backward was given input of the wrong length,
	// a negative row count, or too few values to normalise.
	ErrInput = errors.New("nn: bad input")
	// ErrRemoteInput: in sync mode, another rank's Forward or Backward
	// failed on bad input (it still took part in the collective, which
	// carried the failure to every rank).
	ErrRemoteInput = errors.New("nn: another rank's input was bad")
	// ErrNoForward: Backward without a successful Forward before it.
	ErrNoForward = errors.New("nn: Backward without a Forward")
	// ErrCollective: in sync mode, the allreduce of the statistics or of
	// the gradient sums failed; the collective's error is wrapped too.
	ErrCollective = errors.New("nn: collective failed")
)

// Option configures a layer.
type Option func(*settings)

type settings struct {
	eps, momentum float64
	coll          optim.Collectives
}

// Eps sets the value added to the variance before its square root
// (default DefaultEps). It must be positive.
func Eps(eps float64) Option { return func(c *settings) { c.eps = eps } }

// Momentum sets the weight of each training batch's statistics in the
// running ones, PyTorch's convention: running = (1-m)·running + m·batch
// (default DefaultMomentum). It must lie in [0, 1].
func Momentum(m float64) Option { return func(c *settings) { c.momentum = m } }

// Sync makes the layer a synchronised batch normalisation over coll's
// ranks (optim.FromRuntime, or optim.FromProcessSet for the ranks of a
// process set): training-mode statistics and gradient sums are those of
// the batch that all ranks hold together. Every rank of coll must then
// call Forward and Backward in the same order, in the same mode, with the
// same number of features, including ranks whose batch is empty. A nil
// coll leaves the layer local.
func Sync(coll optim.Collectives) Option { return func(c *settings) { c.coll = coll } }

// BatchNorm normalises each of C features over the rows of a batch
// (PyTorch's BatchNorm1d on n×C input, and SyncBatchNorm with Sync):
//
//	y = (x - mean) / sqrt(var + eps) · weight + bias
//
// In training mode mean and var are the batch's (var biased: divided by
// the row count), and the running statistics move towards them:
// running_mean = (1-m)·running_mean + m·mean, and running_var likewise
// with the unbiased batch variance (divided by the row count minus one).
// In evaluation mode the running statistics normalise and nothing is
// updated; a sync layer then does not communicate.
//
// Forward keeps what Backward needs. Backward takes dLoss/dy, returns
// dLoss/dx and adds dLoss/dweight and dLoss/dbias into the parameters'
// gradients (they accumulate until zeroed, as the rest of a model's).
//
// The statistics are summed in float64 whatever T is (the mean and the
// variance come from Σx and Σx², which is what lets one allreduce carry
// them): accurate unless a feature's mean is some 10⁶ times its standard
// deviation or more, where the variance loses digits to cancellation.
//
// A BatchNorm is not safe for concurrent use.
type BatchNorm[T Float] struct {
	name          string
	c             int
	eps, momentum float64
	coll          optim.Collectives
	training      bool

	weight, bias         optim.Param
	runMean, runVar      []T
	statsName, gradsName string

	// The last Forward: its rows (-1: none, or it failed), mode, the
	// normalised input, the batch's total row count (over every rank in
	// sync mode) and 1/sqrt(var+eps) per feature.
	n        int
	train    bool
	xhat     []T
	total    float64
	mean     []float64
	invstd   []float64
	out, dx  []T
	stats    *tensor.Tensor // [count, sum..., sumsq...], reduced in sync mode
	grads    *tensor.Tensor // [bad, sum dy..., sum dy·xhat...], reduced in sync mode
	pendings []optim.Waiter // sync: reductions whose wait was abandoned
}

// NewBatchNorm returns a batch normalisation of c features named name,
// in training mode, with weight 1, bias 0, running mean 0 and running
// variance 1. Its parameters are name+".weight" and name+".bias"; in sync
// mode its collectives are name+".syncbn.stats" and name+".syncbn.grads",
// so every layer needs its own name (the same on every rank).
func NewBatchNorm[T Float](name string, c int, opts ...Option) (*BatchNorm[T], error) {
	cfg := settings{eps: DefaultEps, momentum: DefaultMomentum}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case name == "":
		return nil, fmt.Errorf("%w: no name", ErrConfig)
	case c < 1:
		return nil, fmt.Errorf("%w: %s: %d features, want at least 1", ErrConfig, name, c)
	case !(cfg.eps > 0) || math.IsInf(cfg.eps, 0):
		return nil, fmt.Errorf("%w: %s: eps %g, want a positive number", ErrConfig, name, cfg.eps)
	case !(cfg.momentum >= 0 && cfg.momentum <= 1):
		return nil, fmt.Errorf("%w: %s: momentum %g, want [0, 1]", ErrConfig, name, cfg.momentum)
	}
	w, b := make([]T, c), make([]T, c)
	rv := make([]T, c)
	for i := range w {
		w[i], rv[i] = 1, 1
	}
	bn := &BatchNorm[T]{
		name: name, c: c, eps: cfg.eps, momentum: cfg.momentum, coll: cfg.coll, training: true,
		weight:    optim.Param{Name: name + ".weight", Value: tensor.From(w, c), Grad: tensor.New(tensor.DTypeOf[T](), c)},
		bias:      optim.Param{Name: name + ".bias", Value: tensor.From(b, c), Grad: tensor.New(tensor.DTypeOf[T](), c)},
		runMean:   make([]T, c),
		runVar:    rv,
		statsName: name + ".syncbn.stats",
		gradsName: name + ".syncbn.grads",
		n:         -1,
		mean:      make([]float64, c),
		invstd:    make([]float64, c),
		stats:     tensor.New(tensor.Float64, 1+2*c),
		grads:     tensor.New(tensor.Float64, 1+2*c),
	}
	return bn, nil
}

// Name returns the layer's name.
func (bn *BatchNorm[T]) Name() string { return bn.name }

// Features returns the number of features C.
func (bn *BatchNorm[T]) Features() int { return bn.c }

// Synced reports whether the layer is synchronised across ranks (Sync).
func (bn *BatchNorm[T]) Synced() bool { return bn.coll != nil }

// Params returns the learnable parameters, weight then bias (each of C
// values). An optimizer updates them in place, and a DistributedOptimizer
// reduces their gradients like any other parameter's; the layer reads and
// writes them only through these tensors.
func (bn *BatchNorm[T]) Params() []optim.Param { return []optim.Param{bn.weight, bn.bias} }

// RunningMean returns the running mean, the layer's own slice: writing
// into it (to restore a checkpoint) changes the layer.
func (bn *BatchNorm[T]) RunningMean() []T { return bn.runMean }

// RunningVar returns the running (unbiased) variance, the layer's own
// slice, as RunningMean.
func (bn *BatchNorm[T]) RunningVar() []T { return bn.runVar }

// SetTraining sets training mode (batch statistics, running statistics
// updated) or, with false, evaluation mode (running statistics).
func (bn *BatchNorm[T]) SetTraining(on bool) { bn.training = on }

// Training reports whether the layer is in training mode.
func (bn *BatchNorm[T]) Training() bool { return bn.training }

// Forward is ForwardContext without a deadline.
func (bn *BatchNorm[T]) Forward(x []T, n int) ([]T, error) {
	return bn.ForwardContext(context.Background(), x, n)
}

// ForwardContext normalises the n rows of x (n×C values, row-major) and
// returns y, n×C values in a slice of the layer's that the next Forward
// overwrites. n may be 0: in sync mode a rank with an empty batch still
// takes part, in training mode, in the allreduce of the statistics, which
// ctx bounds. Training needs at least two rows in the whole batch (over
// every rank in sync mode), as PyTorch does.
//
// In sync mode, a rank given bad input (wrong length, negative n) returns
// ErrInput and still takes part, so that the others return
// ErrRemoteInput instead of waiting; a failed allreduce is ErrCollective
// on every rank.
func (bn *BatchNorm[T]) ForwardContext(ctx context.Context, x []T, n int) ([]T, error) {
	bn.n = -1
	var bad error
	if n < 0 || len(x) != n*bn.c {
		bad = fmt.Errorf("%w: %s: Forward of %d rows of %d features with %d values", ErrInput, bn.name, n, bn.c, len(x))
	}
	if !bn.training {
		if bad != nil {
			return nil, bad
		}
		bn.grow(n)
		for j := range bn.c {
			bn.invstd[j] = 1 / math.Sqrt(float64(bn.runVar[j])+bn.eps)
		}
		for j, v := range bn.runMean {
			bn.mean[j] = float64(v)
		}
		bn.normalise(x, n)
		bn.n, bn.train, bn.total = n, false, float64(n)
		return bn.out[:n*bn.c], nil
	}

	// Per-feature count, sum and sum of squares: this rank's, then, in
	// sync mode, everyone's.
	c := bn.c
	if err := bn.settle(ctx); err != nil {
		return nil, err
	}
	st := bn.stats.Float64s()
	clear(st)
	if bad != nil {
		st[0] = math.NaN()
	} else {
		st[0] = float64(n)
		sum, sq := st[1:1+c], st[1+c:]
		for i := range n {
			for j, v := range x[i*c : (i+1)*c] {
				f := float64(v)
				sum[j] += f
				sq[j] += f * f
			}
		}
	}
	if bn.coll != nil {
		if err := bn.allreduce(ctx, bn.stats, bn.statsName); err != nil {
			return nil, err
		}
	}
	switch {
	case bad != nil:
		return nil, bad
	case math.IsNaN(st[0]):
		return nil, fmt.Errorf("%w: %s: Forward", ErrRemoteInput, bn.name)
	case st[0] < 2:
		return nil, fmt.Errorf("%w: %s: training needs more than one value per feature, the batch has %g rows", ErrInput, bn.name, st[0])
	}
	total := st[0]
	for j := range c {
		m := st[1+j] / total
		v := max(st[1+c+j]/total-m*m, 0) // biased
		bn.mean[j] = m
		bn.invstd[j] = 1 / math.Sqrt(v+bn.eps)
		mo := bn.momentum
		bn.runMean[j] = T((1-mo)*float64(bn.runMean[j]) + mo*m)
		bn.runVar[j] = T((1-mo)*float64(bn.runVar[j]) + mo*v*total/(total-1))
	}
	bn.grow(n)
	bn.normalise(x, n)
	bn.n, bn.train, bn.total = n, true, total
	return bn.out[:n*c], nil
}

// normalise sets xhat and out from x, bn.mean and bn.invstd.
func (bn *BatchNorm[T]) normalise(x []T, n int) {
	mean := bn.mean
	c := bn.c
	w, b := tensor.View[T](bn.weight.Value), tensor.View[T](bn.bias.Value)
	for i := range n {
		row, xh, y := x[i*c:(i+1)*c], bn.xhat[i*c:(i+1)*c], bn.out[i*c:(i+1)*c]
		for j, v := range row {
			h := (float64(v) - mean[j]) * bn.invstd[j]
			xh[j] = T(h)
			y[j] = T(h*float64(w[j]) + float64(b[j]))
		}
	}
}

func (bn *BatchNorm[T]) grow(n int) {
	if k := n * bn.c; k > len(bn.out) {
		bn.xhat, bn.out, bn.dx = make([]T, k), make([]T, k), make([]T, k)
	}
}

// Backward is BackwardContext without a deadline.
func (bn *BatchNorm[T]) Backward(dy []T) ([]T, error) {
	return bn.BackwardContext(context.Background(), dy)
}

// BackwardContext takes dy = dLoss/dy for the rows of the last Forward
// (n×C values) and returns dLoss/dx in a slice of the layer's that the
// next Backward overwrites; it adds this rank's dLoss/dweight = Σ dy·xhat
// and dLoss/dbias = Σ dy (sums over its rows) into the parameters'
// gradients.
//
// After a training-mode Forward, dx is that of single-process batch
// normalisation on the whole batch: in sync mode the sums Σ dy and
// Σ dy·xhat of every rank are added up in one allreduce (bounded by ctx)
// and divided by the whole batch's row count:
//
//	dx = weight/sqrt(var+eps) · (dy - Σdy/N - xhat·Σ(dy·xhat)/N)
//
// so that a rank's dx is exactly its rows of the dx that one process
// computes from the concatenated batch and the concatenated dy. See the
// package documentation for the loss-scaling convention this implies
// under a DistributedOptimizer. After an evaluation-mode Forward, dx =
// weight/sqrt(running_var+eps)·dy, without communication. Errors are as
// ForwardContext's.
func (bn *BatchNorm[T]) BackwardContext(ctx context.Context, dy []T) ([]T, error) {
	if bn.n < 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoForward, bn.name)
	}
	n, c := bn.n, bn.c
	var bad error
	if len(dy) != n*c {
		bad = fmt.Errorf("%w: %s: Backward of %d values after a Forward of %d rows of %d features", ErrInput, bn.name, len(dy), n, c)
	}
	sync := bn.train && bn.coll != nil
	if bad != nil && !sync {
		return nil, bad
	}
	if sync {
		if err := bn.settle(ctx); err != nil {
			return nil, err
		}
	}
	s := bn.grads.Float64s()
	clear(s)
	if bad != nil {
		s[0] = 1
	} else {
		sdy, sdyx := s[1:1+c], s[1+c:]
		for i := range n {
			xh := bn.xhat[i*c : (i+1)*c]
			for j, g := range dy[i*c : (i+1)*c] {
				sdy[j] += float64(g)
				sdyx[j] += float64(g) * float64(xh[j])
			}
		}
		// This rank's parameter gradients: local sums.
		gw, gb := tensor.View[T](bn.weight.Grad), tensor.View[T](bn.bias.Grad)
		for j := range c {
			gw[j] += T(sdyx[j])
			gb[j] += T(sdy[j])
		}
	}
	if sync {
		if err := bn.allreduce(ctx, bn.grads, bn.gradsName); err != nil {
			return nil, err
		}
	}
	switch {
	case bad != nil:
		return nil, bad
	case s[0] != 0:
		return nil, fmt.Errorf("%w: %s: Backward", ErrRemoteInput, bn.name)
	}
	w := tensor.View[T](bn.weight.Value)
	dx := bn.dx[:n*c]
	if !bn.train {
		for i := range n {
			for j, g := range dy[i*c : (i+1)*c] {
				dx[i*c+j] = T(float64(w[j]) * bn.invstd[j] * float64(g))
			}
		}
		return dx, nil
	}
	inv := 1 / bn.total
	sdy, sdyx := s[1:1+c], s[1+c:]
	for i := range n {
		xh := bn.xhat[i*c : (i+1)*c]
		for j, g := range dy[i*c : (i+1)*c] {
			k := float64(w[j]) * bn.invstd[j]
			dx[i*c+j] = T(k * (float64(g) - sdy[j]*inv - float64(xh[j])*sdyx[j]*inv))
		}
	}
	return dx, nil
}

// settle waits for the reductions whose wait an earlier call abandoned
// (a cancelled ctx): they still write into the layer's buffers.
func (bn *BatchNorm[T]) settle(ctx context.Context) error {
	for len(bn.pendings) > 0 {
		if err := bn.pendings[0].Wait(ctx); err != nil && ctx.Err() != nil {
			return fmt.Errorf("%w: %s: waiting for an abandoned reduction: %w", ErrCollective, bn.name, err)
		}
		bn.pendings = bn.pendings[1:]
	}
	return nil
}

// allreduce sums t across the ranks under name; settle must have run.
func (bn *BatchNorm[T]) allreduce(ctx context.Context, t *tensor.Tensor, name string) error {
	w, err := bn.coll.AllreduceAsync(t, name, optim.Sum, 1, 1)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCollective, name, err)
	}
	if err := w.Wait(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Still in flight, writing into t: the next call waits.
			bn.pendings = append(bn.pendings, w)
		}
		return fmt.Errorf("%w: %s: %w", ErrCollective, name, err)
	}
	return nil
}
