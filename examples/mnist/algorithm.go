package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gohorovod/gohorovod/optim"
)

// algorithm is one --algorithm: how the ranks combine their gradients.
type algorithm struct {
	about string // for the first lines printed
	// optimizer returns the optimizer over params and the hook through
	// which it communicates (nil: allreduce, the DistributedOptimizer's
	// own path).
	optimizer func(o options, params []optim.Param) (optim.Optimizer, optim.CommHook, error)
	// allreduces reports whether step (from 0) allreduces the gradients
	// (the "allreduced/step" figure); the others exchange what they send
	// by other collectives, which "sent/step" counts.
	allreduces func(o options, step int) bool
}

// algorithms are the --algorithm names; adding one is adding a line.
var algorithms = map[string]algorithm{
	"gradient_allreduce": {"the gradients allreduced every step", sgdWith(nil), always},
	"bytegrad":           {"the gradients exchanged in 8 bits by ByteGrad (alltoall, then allgather)", sgdWith(byteGrad), never},
	"qadam":              {"QAdam: Adam on allreduced gradients in warm-up, then 8-bit momenta by ByteGrad's exchange", newQAdam, qadamWarm},
}

// algorithmNames lists the --algorithm names, sorted.
func algorithmNames() string {
	var names []string
	for n := range algorithms {
		names = append(names, n)
	}
	names = append(names, weightAlgorithms...) // weights.go
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func always(options, int) bool { return true }

func never(options, int) bool { return false }

func qadamWarm(o options, step int) bool { return step < o.qadamWarmup }

// sgdWith returns the algorithm's optimizer: SGD with the options' hyper-
// parameters, communicating through hook(o) (nil: allreduce, or PowerSGD
// with --powersgd-rank).
func sgdWith(hook func(options) optim.CommHook) func(options, []optim.Param) (optim.Optimizer, optim.CommHook, error) {
	return func(o options, params []optim.Param) (optim.Optimizer, optim.CommHook, error) {
		sgd, err := o.sgd(params)
		if err != nil || hook == nil {
			return sgd, nil, err
		}
		return sgd, hook(o), nil
	}
}

func byteGrad(o options) optim.CommHook {
	return optim.NewByteGrad(optim.ByteGradConfig{ErrorFeedback: o.errorFeedback})
}

// sgd returns SGD over params with the options' hyper-parameters.
func (o options) sgd(params []optim.Param) (optim.Optimizer, error) {
	return optim.NewSGD(params, optim.SGDConfig{LR: o.lr, Momentum: o.momentum, WeightDecay: o.wd})
}

// newQAdam returns QAdam (with --lr, --weight-decay and --qadam-warmup)
// and its hook.
func newQAdam(o options, params []optim.Param) (optim.Optimizer, optim.CommHook, error) {
	q, err := optim.NewQAdam(params, optim.QAdamConfig{AdamConfig: optim.AdamConfig{LR: o.lr, WeightDecay: o.wd, Eps: o.adamEps}, Warmup: o.qadamWarmup})
	if err != nil {
		return nil, nil, err
	}
	return q, q.Hook(), nil
}

// checkAlgorithm checks --algorithm, --zero and the flags they do not
// combine with.
func (o options) checkAlgorithm() error {
	if _, ok := algorithms[o.algorithm]; !ok && !o.alg.weights() {
		return fmt.Errorf("mnist: unknown --algorithm %q (%s)", o.algorithm, algorithmNames())
	}
	other := o.algorithm != "gradient_allreduce"
	switch {
	case o.zero < 0 || o.zero > 2:
		return fmt.Errorf("mnist: --zero %d: 0 (off), 1 or 2", o.zero)
	case o.zero > 0 && other:
		return errors.New("mnist: --zero shards the optimizer of --algorithm gradient_allreduce; it does not combine with " + o.algorithm)
	case (other || o.zero > 0) && (o.psgdRank > 0 || o.compress != "none" || o.localSGD() || o.elastic || o.groups > 0):
		return errors.New("mnist: --algorithm and --zero do not combine with --powersgd-rank, --compression, --local-sgd-start, --elastic or --groups")
	case o.errorFeedback && o.algorithm != "bytegrad":
		return errors.New("mnist: --error-feedback is ByteGrad's (--algorithm bytegrad)")
	case o.qadamWarmup < 1 || o.adamEps <= 0:
		return errors.New("mnist: --qadam-warmup must be at least 1 and --qadam-eps positive")
	}
	return o.alg.check(o) // the weight algorithms' own settings (weights.go)
}

// newZero returns the sharded SGD (Zero at --zero's stage) over params.
func newZero(o options, params []optim.Param, coll optim.Collectives) (*optim.Zero, error) {
	return optim.NewZero(params, coll, o.sgd, optim.ZeroConfig{Stage: o.zero})
}

// describe is the first lines' account of how the gradients travel.
func (o options) describe() string {
	switch o.zero {
	case 1:
		return "ZeRO stage 1: the gradients allreduced, each rank updating its range of the parameters and of the optimizer state, the ranges allgathered"
	case 2:
		return "ZeRO stage 2: the gradients reduce-scattered to the owners of their ranges, each rank updating its range, the ranges allgathered"
	}
	return algorithms[o.algorithm].about
}

// allreduces reports whether step (from 0) allreduces the gradients: not
// at ZeRO stage 2 (a reducescatter), else as the algorithm says.
func (o options) allreduces(step int) bool {
	return o.zero != 2 && algorithms[o.algorithm].allreduces(o, step)
}
