package gomlxopt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/tensor"
)

// ErrOptimizer is returned (wrapped) by NewTrainer for a GoMLX optimizer
// that cannot be given gradients computed elsewhere.
var ErrOptimizer = errors.New("gomlxopt: the optimizer does not implement train.OptimizeWithGradients")

// ErrGraph is returned (wrapped) when GoMLX fails (or panics) building or
// running one of the step's graphs.
var ErrGraph = errors.New("gomlxopt: graph")

// Option configures a Trainer.
type Option func(*config)

type config struct {
	op          tensor.ReduceOp
	compression optim.Compression
	root        int
	prefix      string
}

// WithOp sets how the gradients of the ranks are combined: hvd.Average
// (the default) or hvd.Sum.
func WithOp(op tensor.ReduceOp) Option { return func(c *config) { c.op = op } }

// WithCompression sends float32 gradients as FP16 or BF16 (optim.FP16,
// optim.BF16): half the bytes, at half-precision rounding. Gradients of
// other dtypes travel uncompressed.
func WithCompression(comp optim.Compression) Option {
	return func(c *config) { c.compression = comp }
}

// WithRoot sets the rank whose initial variables every rank starts from
// (default 0).
func WithRoot(root int) Option { return func(c *config) { c.root = root } }

// WithName prefixes the names of the trainer's collectives, so that two
// trainers can run in the same job (default "gomlx").
func WithName(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// Trainer runs data-parallel training steps of a GoMLX model. Each step is
// two compiled graphs with gohorovod in between: the gradient graph (model,
// loss and gradients of every trainable variable), then, on the host, an
// allreduce of the gradients over the Collectives, then the apply graph
// (the GoMLX optimizer's UpdateGraphWithGradients on the reduced
// gradients, and the per-step update hooks). The model, its variables, the
// optimizer and its state stay GoMLX's own, in the user's Context, so
// GoMLX's checkpoints save and restore them as usual.
//
// The first step (or Prepare) builds both graphs and initialises the
// variables; the first step then broadcasts every variable from the root
// rank, so that all ranks start identical and stay so. A Trainer is used
// by one goroutine at a time.
type Trainer struct {
	backend backends.Backend
	ctx     *mlctx.Context
	modelFn train.ModelFn
	lossFn  train.LossFn
	opt     train.OptimizeWithGradients
	coll    optim.Collectives
	cfg     config

	gradExec, applyExec *mlctx.Exec
	prepared, synced    bool
	trainable           []*mlctx.Variable // in the order of the gradients
	lossDType           dtypes.DType
	pendingLR           float64
	nLabels             int
	dry                 map[*mlctx.Variable][]byte // values to restore after the dry apply

	stats Stats
}

// Stats counts where a Trainer's steps spent their time, in seconds.
type Stats struct {
	Steps int
	// Grad: running the gradient graph; Comm: copying the gradients out,
	// allreducing them and copying them back; Apply: running the apply
	// graph.
	Grad, Comm, Apply float64
}

// NewTrainer returns a Trainer of the model modelFn with the loss lossFn,
// trained by opt (a GoMLX optimizer implementing
// train.OptimizeWithGradients, as SGD and Adam do) over the variables of
// ctx, with the gradients combined over coll (optim.FromRuntime(hvd.Default())
// for the job's ranks).
func NewTrainer(backend backends.Backend, ctx *mlctx.Context, modelFn train.ModelFn, lossFn train.LossFn,
	opt optimizers.Interface, coll optim.Collectives, opts ...Option) (*Trainer, error) {
	switch {
	case backend == nil || ctx == nil || modelFn == nil || lossFn == nil || coll == nil:
		return nil, errors.New("gomlxopt: NewTrainer needs a backend, a context, a model, a loss and collectives")
	}
	withGrads, ok := opt.(train.OptimizeWithGradients)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrOptimizer, opt)
	}
	t := &Trainer{backend: backend, ctx: ctx, modelFn: modelFn, lossFn: lossFn, opt: withGrads, coll: coll,
		cfg: config{op: optim.Average, prefix: "gomlx"}}
	for _, o := range opts {
		o(&t.cfg)
	}
	switch t.cfg.op {
	case optim.Average, tensor.Sum:
	default:
		return nil, fmt.Errorf("gomlxopt: gradients are combined with Average or Sum, not %v", t.cfg.op)
	}
	if t.cfg.compression > optim.BF16 {
		return nil, fmt.Errorf("gomlxopt: unknown compression %v", t.cfg.compression)
	}
	if t.cfg.root < 0 || t.cfg.root >= coll.Size() {
		return nil, fmt.Errorf("gomlxopt: root %d of %d ranks", t.cfg.root, coll.Size())
	}
	var err error
	if t.gradExec, err = mlctx.NewExec(backend, ctx, t.gradGraph); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGraph, err)
	}
	if t.applyExec, err = mlctx.NewExec(backend, ctx, t.applyGraph); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGraph, err)
	}
	return t, nil
}

// Context returns the GoMLX context that holds the variables.
func (t *Trainer) Context() *mlctx.Context { return t.ctx }

// Stats returns the time spent so far in the steps' parts.
func (t *Trainer) Stats() Stats { return t.stats }

// SetCollectives replaces the collectives, for instance after an elastic
// job re-formed (in a reset callback, with optim.FromRuntime of the
// runtime).
func (t *Trainer) SetCollectives(coll optim.Collectives) error {
	if coll == nil {
		return errors.New("gomlxopt: nil collectives")
	}
	if t.cfg.root >= coll.Size() {
		return fmt.Errorf("gomlxopt: root %d of %d ranks", t.cfg.root, coll.Size())
	}
	t.coll = coll
	return nil
}

// gradGraph builds the forward pass, the loss (with any regularisation
// terms the model added with train.AddLoss) and the gradients of the
// trainable variables: its outputs are the loss and then the gradients.
func (t *Trainer) gradGraph(ctx *mlctx.Context, inputsAndLabels []*graph.Node) []*graph.Node {
	g := inputsAndLabels[0].Graph()
	nIn := len(inputsAndLabels) - t.nLabels
	inputs, labels := inputsAndLabels[:nIn], inputsAndLabels[nIn:]
	ctx.SetTraining(g, true)
	predictions := t.modelFn(ctx, nil, inputs)
	base := t.lossFn(labels, predictions)
	if !base.Shape().IsScalar() {
		base = graph.ReduceAllMean(base)
	}
	train.SetLossNoRegularization(ctx, base)
	train.AddLoss(ctx, base)
	loss := train.GetLosses(ctx, g)
	grads := ctx.BuildTrainableVariablesGradientsGraph(loss)
	var trainable []*mlctx.Variable
	for v := range ctx.IterVariables() {
		if v.Trainable && v.InUseByGraph(g) {
			trainable = append(trainable, v)
		}
	}
	if t.trainable == nil {
		t.trainable, t.lossDType = trainable, loss.DType()
	} else if !slices.Equal(t.trainable, trainable) {
		panic("gomlxopt: the model's trainable variables changed between graphs")
	}
	return append([]*graph.Node{loss}, grads...)
}

// applyGraph hands the reduced gradients to the optimizer. The trainable
// variables are read first, so that the optimizer (which updates the
// trainable variables the graph uses, in the Context's order) pairs them
// with the gradients as the gradient graph produced them.
func (t *Trainer) applyGraph(ctx *mlctx.Context, grads []*graph.Node) *graph.Node {
	g := grads[0].Graph()
	ctx.SetTraining(g, true)
	for _, v := range t.trainable {
		v.ValueGraph(g)
	}
	t.opt.UpdateGraphWithGradients(ctx, grads, t.lossDType)
	train.ExecPerStepUpdateGraphFn(ctx, g)
	if t.dry != nil {
		// Variables the optimizer created with a value (the learning
		// rate, the global step): their values before the dry run.
		for v := range ctx.IterVariables() {
			if _, ok := t.dry[v]; !ok && v.HasValue() {
				b, err := hostCopy(v)
				if err != nil {
					panic(err)
				}
				t.dry[v] = b.Bytes()
			}
		}
	}
	return optimizers.GetGlobalStepVar(ctx).ValueGraph(g)
}

// catch turns a panic of GoMLX into an error.
func catch(err *error) {
	if r := recover(); r != nil {
		if e, ok := r.(error); ok {
			*err = fmt.Errorf("%w: %w", ErrGraph, e)
		} else {
			*err = fmt.Errorf("%w: %v", ErrGraph, r)
		}
	}
}

// Prepare builds and compiles both graphs for batches shaped like inputs
// and labels and initialises the variables that have no value, on this
// rank alone (no collective runs). TrainStep calls it on its first call;
// call it first where the variables must exist before training, as for
// ElasticHandler.
func (t *Trainer) Prepare(inputs, labels []*tensors.Tensor) (err error) {
	if t.prepared {
		return nil
	}
	defer catch(&err)
	if len(inputs) == 0 {
		return errors.New("gomlxopt: no inputs")
	}
	t.nLabels = len(labels)
	args := make([]any, 0, len(inputs)+len(labels))
	for _, x := range inputs {
		args = append(args, x)
	}
	for _, x := range labels {
		args = append(args, x)
	}
	if err := t.gradExec.PreCompile(args...); err != nil {
		return fmt.Errorf("%w: gradient graph: %w", ErrGraph, err)
	}
	if len(t.trainable) == 0 {
		return errors.New("gomlxopt: the model has no trainable variables")
	}
	// As GoMLX's trainer does: the variables exist now, and a batch of
	// another shape builds new graphs over them.
	t.ctx = t.ctx.Checked(false)
	t.gradExec.SetContext(t.ctx)
	t.applyExec.SetContext(t.ctx)
	if err := t.ctx.InitializeVariables(t.backend, nil); err != nil {
		return fmt.Errorf("%w: initialising variables: %w", ErrGraph, err)
	}
	if err := t.dryApply(); err != nil {
		return err
	}
	t.prepared = true
	if t.pendingLR > 0 {
		return t.SetLR(t.pendingLR)
	}
	return nil
}

// dryApply builds and compiles the apply graph by running it once on zero
// gradients, so that the optimizer creates its variables (its state, the
// learning rate, the global step) and every rank holds the same set of
// variables before any collective; then it puts every variable back to
// its value before the run, or, for those the optimizer initialised,
// initialises them again. (GoMLX's Exec.PreCompile cannot do this: it
// hands the buffers of the variables the graph changes to the compiled
// graph and drops their values.)
func (t *Trainer) dryApply() error {
	t.dry = map[*mlctx.Variable][]byte{}
	defer func() { t.dry = nil }()
	for _, v := range t.variables() {
		b, err := hostCopy(v)
		if err != nil {
			return err
		}
		t.dry[v] = b.Bytes()
	}
	zeros := make([]any, len(t.trainable))
	for i, v := range t.trainable {
		zeros[i] = tensors.FromShape(v.Shape())
	}
	if _, err := t.applyExec.Exec(zeros...); err != nil {
		return fmt.Errorf("%w: apply graph: %w", ErrGraph, err)
	}
	for v := range t.ctx.IterVariables() {
		if b, ok := t.dry[v]; ok {
			if err := setFromBytes(v, b); err != nil {
				return err
			}
		} else if err := v.Reset(); err != nil {
			return fmt.Errorf("%w: %w", ErrGraph, err)
		}
	}
	if err := t.ctx.InitializeVariables(t.backend, nil); err != nil {
		return fmt.Errorf("%w: initialising the optimizer's variables: %w", ErrGraph, err)
	}
	return nil
}

// BroadcastVariables replaces every variable of the context (the model's
// and the optimizer's) by the root rank's. The first TrainStep calls it;
// it must run on every rank at the same point.
func (t *Trainer) BroadcastVariables(ctx context.Context) error {
	if !t.prepared {
		return errors.New("gomlxopt: BroadcastVariables before the graphs exist (call Prepare or TrainStep)")
	}
	vars := t.variables()
	bufs := make([]*tensor.Tensor, len(vars))
	ws := make([]optim.Waiter, 0, len(vars))
	var startErr error
	for i, v := range vars {
		b, err := hostCopy(v)
		if err != nil {
			startErr = err
			break
		}
		bufs[i] = b
		w, err := t.coll.BroadcastAsync(b, t.cfg.root, t.cfg.prefix+".bcast."+v.ScopeAndName())
		if err != nil {
			startErr = fmt.Errorf("gomlxopt: broadcast of %s: %w", v.ScopeAndName(), err)
			break
		}
		ws = append(ws, w)
	}
	if err := waitAll(ctx, ws); startErr == nil {
		startErr = err
	}
	if startErr != nil {
		return startErr
	}
	for i, v := range vars {
		if err := setFromBytes(v, bufs[i].Bytes()); err != nil {
			return err
		}
	}
	t.synced = true
	return nil
}

// variables returns every variable with a value, in the Context's
// deterministic order.
func (t *Trainer) variables() []*mlctx.Variable {
	var out []*mlctx.Variable
	for v := range t.ctx.IterVariables() {
		if v.HasValue() {
			out = append(out, v)
		}
	}
	return out
}

func waitAll(ctx context.Context, ws []optim.Waiter) error {
	var first error
	for _, w := range ws {
		if err := w.Wait(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// TrainStep runs one data-parallel step on this rank's batch (inputs and
// labels as the model and loss take them) and returns the loss of this
// rank's batch. Every rank must call it the same number of times, with
// batches of the same shapes. Errors of the runtime (a lost rank, a
// cancelled ctx) are returned; the variables are then as before the
// step's apply.
func (t *Trainer) TrainStep(ctx context.Context, inputs, labels []*tensors.Tensor) (loss float64, err error) {
	if !t.prepared {
		if err := t.Prepare(inputs, labels); err != nil {
			return 0, err
		}
	}
	if !t.synced {
		if err := t.BroadcastVariables(ctx); err != nil {
			return 0, err
		}
	}
	defer catch(&err)
	if len(labels) != t.nLabels {
		return 0, fmt.Errorf("gomlxopt: %d labels, the graphs were built for %d", len(labels), t.nLabels)
	}
	args := make([]any, 0, len(inputs)+len(labels))
	for _, x := range inputs {
		args = append(args, x)
	}
	for _, x := range labels {
		args = append(args, x)
	}
	t0 := time.Now()
	outs, err := t.gradExec.Exec(args...)
	if err != nil {
		return 0, fmt.Errorf("%w: gradient step: %w", ErrGraph, err)
	}
	t1 := time.Now()
	loss, err = scalar(outs[0])
	if err != nil {
		return 0, err
	}
	grads, err := t.allreduce(ctx, outs[1:])
	if err != nil {
		return 0, err
	}
	t2 := time.Now()
	gargs := make([]any, len(grads))
	for i, g := range grads {
		gargs[i] = g
	}
	if _, err := t.applyExec.Exec(gargs...); err != nil {
		return 0, fmt.Errorf("%w: apply step: %w", ErrGraph, err)
	}
	t3 := time.Now()
	t.stats.Steps++
	t.stats.Grad += t1.Sub(t0).Seconds()
	t.stats.Comm += t2.Sub(t1).Seconds()
	t.stats.Apply += t3.Sub(t2).Seconds()
	return loss, nil
}

// allreduce combines the gradients over the collectives. Each gradient's
// allreduce starts as soon as it is copied out (and compressed), so the
// copies of the next ones overlap the communication of the first.
func (t *Trainer) allreduce(ctx context.Context, grads []*tensors.Tensor) ([]*tensors.Tensor, error) {
	if len(grads) != len(t.trainable) {
		return nil, fmt.Errorf("gomlxopt: %d gradients for %d trainable variables", len(grads), len(t.trainable))
	}
	type job struct {
		wire *tensor.Tensor // what travels
		full []float32      // decompressed result, for compressed gradients
		w    optim.Waiter
	}
	jobs := make([]job, len(grads))
	var startErr error
	for i, g := range grads {
		v := t.trainable[i]
		b, err := toHost(g)
		if err != nil {
			startErr = err
			break
		}
		j := job{wire: b}
		if b.DType() == tensor.Float32 && t.cfg.compression != optim.NoCompression {
			j.full = b.Float32s()
			j.wire = compress(j.full, t.cfg.compression)
		}
		j.w, err = t.coll.AllreduceAsync(j.wire, t.cfg.prefix+".grad."+v.ScopeAndName(), t.cfg.op, 1, 1)
		if err != nil {
			startErr = fmt.Errorf("gomlxopt: allreduce of the gradient of %s: %w", v.ScopeAndName(), err)
			break
		}
		jobs[i] = j
	}
	var ws []optim.Waiter
	for _, j := range jobs {
		if j.w != nil {
			ws = append(ws, j.w)
		}
	}
	if err := waitAll(ctx, ws); startErr == nil {
		startErr = err
	}
	if startErr != nil {
		return nil, startErr
	}
	out := make([]*tensors.Tensor, len(grads))
	for i, j := range jobs {
		if j.full != nil {
			decompress(j.full, j.wire)
		}
		g, err := fromHost(j.wire, j.full, grads[i].Shape())
		if err != nil {
			return nil, err
		}
		out[i] = g
	}
	return out, nil
}

// SetLR sets the learning rate of the next steps (the GoMLX optimizer's
// learning-rate variable). Horovod scales the single-process learning rate
// by the number of ranks: SetLR(lr·size), with a warmup (optim.Warmup) for
// large sizes. Before the first step it takes effect when the variable is
// created.
func (t *Trainer) SetLR(lr float64) error {
	if lr <= 0 {
		return fmt.Errorf("gomlxopt: learning rate %g", lr)
	}
	v := t.lrVar()
	if v == nil {
		t.pendingLR = lr
		t.ctx.SetParam(optimizers.ParamLearningRate, lr)
		return nil
	}
	val, err := tensorOfDType(v.DType(), lr)
	if err != nil {
		return err
	}
	return v.SetValue(val)
}

// LR returns the learning rate of the next steps (0 before the optimizer
// created its variable and SetLR was called).
func (t *Trainer) LR() float64 {
	v := t.lrVar()
	if v == nil {
		return t.pendingLR
	}
	lr, err := scalar(v.MustValue())
	if err != nil {
		return 0
	}
	return lr
}

func (t *Trainer) lrVar() *mlctx.Variable {
	return t.ctx.InspectVariable(t.ctx.In(optimizers.Scope).Scope(), optimizers.ParamLearningRate)
}

// ScaleLR returns the learning rate of size ranks for one process's base
// rate, as Horovod scales it (linearly: base·size).
func ScaleLR(base float64, size int) float64 { return base * float64(size) }
