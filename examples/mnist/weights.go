package main

// The algorithms that exchange weights rather than gradients (--algorithm
// decentralized, low_precision_decentralized, async): each rank steps a
// plain SGD on its own batches, and the algorithm (optim.Decentralized,
// optim.LowPrecisionDecentralized, optim.AsyncModelAverage) keeps the
// replicas together.

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"github.com/gohorovod/gohorovod/examples/internal/mnist"
	"github.com/gohorovod/gohorovod/internal/mlp"
	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// algorithmOptions are the settings of --algorithm.
type algorithmOptions struct {
	name         string // --algorithm (set by parse)
	peers        string // decentralized: all or shift_one
	interval     int    // decentralized and low_precision_decentralized: steps between communications
	hierarchical bool   // decentralized: average within each node first
	asyncMS      int    // async: milliseconds between averaging rounds
}

// The weight-exchanging algorithms.
const (
	algDecentralized = "decentralized"
	algLowPrecision  = "low_precision_decentralized"
	algAsync         = "async"
)

// addAlgorithmFlags adds the weight algorithms' settings (--algorithm
// itself is parse's).
func addAlgorithmFlags(fs *pflag.FlagSet, a *algorithmOptions) {
	fs.StringVar(&a.peers, "peer-selection", "all", "with --algorithm decentralized: average with all ranks, or with one peer per step (shift_one: an even number of ranks)")
	fs.IntVar(&a.interval, "communication-interval", 1, "with the decentralized algorithms: steps from one weight exchange to the next")
	fs.BoolVar(&a.hierarchical, "hierarchical", false, "with --algorithm decentralized: average within each node, then among the node leaders")
	fs.IntVar(&a.asyncMS, "async-interval-ms", 50, "with --algorithm async: milliseconds between background averaging rounds")
}

// weightAlgorithms are the --algorithm names that exchange weights (run
// by runWeights) rather than gradients (algorithm.go's table).
var weightAlgorithms = []string{algDecentralized, algLowPrecision, algAsync}

// weights reports whether the algorithm exchanges weights.
func (a algorithmOptions) weights() bool { return slices.Contains(weightAlgorithms, a.name) }

// check refuses a weight algorithm's bad settings, and the options of
// the gradient path that the weight algorithms do not take.
func (a algorithmOptions) check(o options) error {
	if !a.weights() {
		return nil
	}
	switch {
	case a.peers != "all" && a.peers != "shift_one":
		return fmt.Errorf("mnist: unknown --peer-selection %q (all, shift_one)", a.peers)
	case a.interval < 1:
		return fmt.Errorf("mnist: --communication-interval %d must be >= 1", a.interval)
	case a.asyncMS < 1:
		return fmt.Errorf("mnist: --async-interval-ms %d must be >= 1", a.asyncMS)
	case o.elastic || o.localSGD() || o.norm != "none" || o.compress != "none" || o.psgdRank > 0:
		return fmt.Errorf("mnist: --algorithm %s takes none of --elastic, --local-sgd-start, --batchnorm, --compression, --powersgd-rank", a.name)
	}
	return nil
}

// weightTrainer is what runWeights needs of an algorithm: an optimizer
// whose step communicates, and the bytes it has sent so far.
type weightTrainer interface {
	optim.Optimizer
	StepContext(ctx context.Context) error
	sent() int64
	start() error // before the forward pass
	finish(ctx context.Context) error
}

// newWeightTrainer wraps a plain SGD over the model in the algorithm.
func newWeightTrainer(ctx context.Context, o options, r *hvd.Runtime, model *mlp.MLP) (weightTrainer, string, error) {
	inner, err := optim.NewSGD(model.Params(), optim.SGDConfig{LR: o.lr, Momentum: o.momentum, WeightDecay: o.wd})
	if err != nil {
		return nil, "", err
	}
	c, err := optim.FromRuntime(r)
	if err != nil {
		return nil, "", err
	}
	coll := c.(optim.ExchangeCollectives)
	a := o.alg
	switch a.name {
	case algDecentralized:
		cfg := optim.DecentralizedConfig{CommunicationInterval: a.interval}
		if a.peers == "shift_one" {
			cfg.PeerSelection = optim.PeerShiftOne
		}
		if a.hierarchical {
			if cfg.Hierarchy, err = optim.NewHierarchy(ctx, r); err != nil {
				return nil, "", err
			}
		}
		d, err := optim.NewDecentralized(inner, coll, cfg)
		return &countingTrainer{exchanger: d}, fmt.Sprintf("decentralized SGD: weights averaged with %s every %d steps (hierarchical %v)", a.peers, a.interval, a.hierarchical), err
	case algLowPrecision:
		d, err := optim.NewLowPrecisionDecentralized(inner, coll, optim.LowPrecisionConfig{CommunicationInterval: a.interval})
		return &countingTrainer{exchanger: d}, fmt.Sprintf("low-precision decentralized SGD: 8-bit weight differences to both ring neighbours every %d steps", a.interval), err
	default:
		d, err := optim.NewAsyncModelAverage(inner, coll, optim.AsyncConfig{Interval: time.Duration(a.asyncMS) * time.Millisecond})
		return &asyncTrainer{AsyncModelAverage: d}, fmt.Sprintf("asynchronous model average: weights averaged in the background every %d ms", a.asyncMS), err
	}
}

// exchanger is what decentralized and low-precision decentralized SGD
// have in common: whether the next step communicates, and what the last
// communication sent.
type exchanger interface {
	optim.Optimizer
	StepContext(ctx context.Context) error
	Communicates() bool
	BytesSent() int
}

// countingTrainer adds up the bytes an exchanger sends.
type countingTrainer struct {
	exchanger
	total int64
}

func (t *countingTrainer) StepContext(ctx context.Context) error {
	c := t.Communicates()
	if err := t.exchanger.StepContext(ctx); err != nil {
		return err
	}
	if c {
		t.total += int64(t.BytesSent())
	}
	return nil
}
func (t *countingTrainer) sent() int64 { return t.total }

// finish completes the last exchange where the algorithm leaves one in
// flight (low-precision decentralized).
func (t *countingTrainer) finish(ctx context.Context) error {
	if w, ok := t.exchanger.(interface{ Wait(context.Context) error }); ok {
		return w.Wait(ctx)
	}
	return nil
}

// start starts the exchange before the forward pass where the algorithm
// can (decentralized SGD).
func (t *countingTrainer) start() error {
	if s, ok := t.exchanger.(interface{ Start() error }); ok {
		return s.Start()
	}
	return nil
}

type asyncTrainer struct{ *optim.AsyncModelAverage }

func (t *asyncTrainer) sent() int64  { return int64(t.Rounds() * t.BytesPerRound()) }
func (t *asyncTrainer) start() error { return nil }
func (t *asyncTrainer) finish(ctx context.Context) error {
	return t.Finish(ctx)
}

// runWeights trains with a weight-exchanging algorithm. At each epoch's
// end it evaluates the mean of the ranks' replicas (restoring each rank's
// own weights afterwards, except after the last epoch, where every rank
// keeps the mean: one model, as in run).
func runWeights(ctx context.Context, o options, r *hvd.Runtime, out io.Writer) (res result, err error) {
	rank, size := r.Rank(), r.Size()
	s, err := begin(ctx, o, r)
	if err != nil {
		return res, err
	}
	train, test, widths, model, sampler, sched := s.train, s.test, s.widths, s.model, s.sampler, s.sched
	opt, text, err := newWeightTrainer(ctx, o, r, model)
	if err != nil {
		return res, err
	}
	if rank == 0 {
		fmt.Fprintf(out, "mnist: %d ranks, MLP %v, batch %d per rank, lr %g·%d, %d epochs\n%s\n", size, widths, o.batch, o.lr, size, o.epochs, text)
	}
	for epoch := range o.epochs {
		sampler.SetEpoch(epoch)
		start, sent0 := time.Now(), opt.sent()
		loss, steps, err := weightEpoch(ctx, opt, model, train, sampler.Batches(o.batch, false), sched, epoch, o.batch)
		if err != nil {
			return res, err
		}
		elapsed := time.Since(start)
		last := epoch == o.epochs-1
		if res, err = evaluateMean(ctx, s.coll, opt, model, test, loss, last); err != nil {
			return res, err
		}
		if rank == 0 {
			fmt.Fprintf(out, "epoch %d: loss %.4f  test accuracy %.2f%%  %.1fs  %.0f samples/s  %.1f KiB sent/step  lr %.4g\n",
				epoch+1, res.loss, 100*res.accuracy, elapsed.Seconds(), float64(size)*loss.Weight/elapsed.Seconds(),
				float64(opt.sent()-sent0)/1024/float64(steps), opt.LR())
		}
	}
	res.checksum = checksum(model)
	return res, nil
}

// weightEpoch trains one epoch's batches and returns the loss metric and
// the number of steps.
func weightEpoch(ctx context.Context, opt weightTrainer, model *mlp.MLP, train *mnist.Set, batches [][]int, sched optim.Schedule, epoch, batch int) (optim.Metric, int, error) {
	loss := optim.Metric{Name: "loss"}
	x := make([]float32, batch*mnist.Pixels)
	y := make([]uint8, batch)
	for b, idx := range batches {
		opt.SetLR(sched.LR(float64(epoch) + float64(b+1)/float64(len(batches))))
		fillBatch(train, idx, x, y)
		if err := opt.start(); err != nil { // the exchange overlaps forward and backward
			return loss, 0, err
		}
		if err := opt.ZeroGrad(); err != nil {
			return loss, 0, err
		}
		if _, err := model.Forward(x, len(idx)); err != nil {
			return loss, 0, err
		}
		l, _ := model.Loss(y[:len(idx)])
		if err := model.Backward(func(optim.Param) error { return nil }); err != nil {
			return loss, 0, err
		}
		if err := opt.StepContext(ctx); err != nil {
			return loss, 0, err
		}
		loss.Add(l, float64(len(idx)))
	}
	return loss, len(batches), nil
}

// evaluateMean evaluates the mean of the ranks' weights: after the last
// epoch (last), the algorithm's finish first, and the mean is kept.
func evaluateMean(ctx context.Context, coll optim.Collectives, opt weightTrainer, model *mlp.MLP, test *mnist.Set, loss optim.Metric, last bool) (result, error) {
	if last {
		if err := opt.finish(ctx); err != nil {
			return result{}, err
		}
	}
	var saved []*tensor.Tensor
	for _, p := range model.Params() {
		saved = append(saved, p.Value.Clone())
	}
	if err := averageParams(ctx, coll, model.Params()); err != nil {
		return result{}, err
	}
	res, err := evaluateAll(ctx, coll, model, test, &loss, nil)
	if !last {
		for i, p := range model.Params() {
			copy(p.Value.Bytes(), saved[i].Bytes())
		}
	}
	return res, err
}

// averageParams replaces every parameter by its mean over the ranks
// (optim's ModelAverager, at once).
func averageParams(ctx context.Context, coll optim.Collectives, params []optim.Param) error {
	avg, err := optim.NewModelAverager(coll, params, 1)
	if err != nil {
		return err
	}
	return avg.AverageNow(ctx, 0)
}
