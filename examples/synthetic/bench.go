package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gohorovod/gohorovod/internal/cputime"
	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// report is what a benchmark run measured, the same on every rank.
type report struct {
	tuneSteps      int  // warm-up steps run while autotuning
	tuneLeft       bool // autotuning had not finished when timing began (on this rank)
	ranks, tensors int
	elements       int
	passes         float64   // calibrated sweeps per gradient element in a backward
	rankSteps      []float64 // steps per second, per rank
	rankCI         []float64 // half width of the 95% interval over iterations, per rank
	totalSteps     float64   // steps per second summed over ranks
	samples        float64   // samples per second over all ranks
	// Medians over steps, averaged over ranks, in milliseconds.
	stepMS, computeMS, commMS, updateMS float64
	stepMeanMS, stepMaxMS               float64 // mean (from the rate) and slowest step
	hiddenMS, overlap                   float64
	reducedInBackward                   float64 // mean share of gradients reduced when backward's compute ended
	firstReducedEarly                   float64 // share of steps whose first gradient was reduced by then
	// Bytes of fused allreduces on rank 0 since Init: reduced where they
	// lie (flat gradients) and copied through the fusion buffer.
	fusedInPlace, fusedCopied int64
	// bytesPerStep is what the optimizer allreduced per timed step on
	// rank 0 (the gradients, or PowerSGD's factors and the rest).
	bytesPerStep float64
	// sentPerStep is what rank 0 sent per timed step, by the runtime's
	// count (hvd.Stats.SentBytes: every collective, ByteGrad's too).
	sentPerStep float64
	// cpuMSPerSample is the CPU time of the timed steps, every rank's
	// process summed, in milliseconds per sample (0: not known).
	cpuMSPerSample float64
}

// poller is the part of a runtime handle the tracker needs.
type poller interface{ Poll() bool }

// tracker passes collectives through and keeps the handles of the current
// step's allreduces (per gradient, or per bucket of the reduce groups), to
// see which have completed at a given moment. It holds reduce groups only
// when the collectives it wraps do (the DistributedOptimizer asks at
// construction).
type tracker struct {
	optim.Collectives
	mu    sync.Mutex
	hs    []poller
	bytes atomic.Int64 // allreduced through the tracker
}

func (t *tracker) AllreduceAsync(x *tensor.Tensor, name string, op tensor.ReduceOp, prescale, postscale float64) (optim.Waiter, error) {
	w, err := t.Collectives.AllreduceAsync(x, name, op, prescale, postscale)
	if err == nil {
		t.bytes.Add(int64(x.NumBytes()))
		t.track(w)
	}
	return w, err
}

// NewReduceGroup passes the DistributedOptimizer's reduce groups through,
// tracking the handles of their steps, when the collectives hold groups.
func (t *tracker) NewReduceGroup(ts []*tensor.Tensor, names []string, op tensor.ReduceOp, prescale, postscale float64) (optim.ReduceGroup, error) {
	gc, ok := t.Collectives.(optim.ReduceGroupCollectives)
	if !ok {
		return nil, errors.New("synthetic: the collectives hold no reduce groups")
	}
	g, err := gc.NewReduceGroup(ts, names, op, prescale, postscale)
	if err != nil {
		return nil, err
	}
	n := 0
	for _, x := range ts {
		n += x.NumBytes()
	}
	return trackedGroup{g, t, int64(n)}, nil
}

// trackedGroup is a reduce group whose steps the tracker sees.
type trackedGroup struct {
	optim.ReduceGroup
	t     *tracker
	bytes int64
}

func (g trackedGroup) Start() (optim.Waiter, error) {
	w, err := g.ReduceGroup.Start()
	if err == nil {
		g.t.bytes.Add(g.bytes)
		g.t.track(w)
	}
	return w, err
}

// track keeps w's handle for completed.
func (t *tracker) track(w optim.Waiter) {
	if p, ok := w.(poller); ok {
		t.mu.Lock()
		t.hs = append(t.hs, p)
		t.mu.Unlock()
	}
}

func (t *tracker) reset() {
	t.mu.Lock()
	t.hs = t.hs[:0]
	t.mu.Unlock()
}

// completed returns how many of the allreduces started so far have
// completed, of how many, and whether the first one has.
func (t *tracker) completed() (done, started int, first bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, h := range t.hs {
		if h.Poll() {
			done++
			if i == 0 {
				first = true
			}
		}
	}
	return done, len(t.hs), first
}

// bench is one rank's benchmark state.
type bench struct {
	m      *model
	inner  optim.Optimizer
	opt    *optim.DistributedOptimizer
	tr     *tracker
	passes float64
	// firstStep is when the first training step ended.
	firstStep time.Time
}

// backward runs the backward pass: each layer's compute in reverse order,
// handing its gradient to the optimizer when comm is set. It returns, when
// comm is set, the share of the other gradients' allreduces that had
// completed when the last layer's compute ended, and whether the first had.
func (b *bench) backward(comm bool) (reduced float64, first bool, err error) {
	b.tr.reset()
	for i := len(b.m.params) - 1; i >= 0; i-- {
		b.m.compute(i, b.passes)
		if i == 0 && comm {
			var done, started int
			done, started, first = b.tr.completed()
			if started > 0 {
				reduced = float64(done) / float64(started)
			}
		}
		if comm {
			if err := b.opt.Ready(b.m.params[i]); err != nil {
				return 0, false, err
			}
		}
	}
	return reduced, first, nil
}

// calibrate sets b.passes so that a backward's compute takes about ms
// milliseconds on this rank, then averages it over the ranks so that every
// rank does the same work.
func (b *bench) calibrate(ctx context.Context, r *hvd.Runtime, ms float64) error {
	if ms == 0 {
		b.passes = 0
		return nil
	}
	b.passes = 1
	b.backward(false) // warm the caches and the pages
	// Two rounds of correction, each from the median of three backwards
	// (the first round also finds the scale, the second the cache effects
	// of the new amount of work).
	for range 2 {
		var ts []float64
		for range 3 {
			start := time.Now()
			b.backward(false)
			ts = append(ts, msSince(start))
		}
		b.passes *= ms / max(median(ts), 1e-3)
		b.passes = min(max(b.passes, 1e-6), 1e9)
	}
	t := tensor.FromFloat64([]float64{b.passes})
	if err := r.AllreduceInPlace(ctx, t, "synthetic.calibrate", hvd.Average); err != nil {
		return err
	}
	b.passes = t.Float64s()[0]
	return nil
}

// run benchmarks on the initialised runtime r and prints the report as
// key=value lines to out on rank 0.
func run(ctx context.Context, o options, r *hvd.Runtime, out io.Writer) (rep report, err error) {
	layers, err := loadShapes(o.model, o.shapes)
	if err != nil {
		return rep, err
	}
	b, err := newBench(ctx, o, r, layers)
	if err != nil {
		return rep, err
	}
	defer func() {
		if cerr := b.opt.Close(); err == nil {
			err = cerr
		}
	}()
	if err := b.calibrate(ctx, r, o.computeMS); err != nil {
		return rep, err
	}
	for range o.warmup {
		if _, _, err := b.step(ctx); err != nil {
			return rep, err
		}
	}
	tuneSteps, err := b.tune(ctx, r, o.tuneMax)
	if err != nil {
		return rep, err
	}
	unfinished := r.Stats().Tuning
	if err := r.Barrier(ctx); err != nil {
		return rep, err
	}
	t, err := b.timeSteps(ctx, r, o)
	if err != nil {
		return rep, err
	}
	probes, err := b.probe(ctx, r, o.missSteps)
	if err != nil {
		return rep, err
	}
	if _, err := b.hold(ctx, r, o, out); err != nil {
		return rep, err
	}
	// Each part of a step alone.
	var parts [3]float64
	if o.partSteps > 0 {
		if parts, err = b.parts(ctx, r, o.partSteps); err != nil {
			return rep, err
		}
	}
	if rep, err = b.combine(ctx, r, o, t, parts); err != nil {
		return rep, err
	}
	rep.tuneSteps, rep.tuneLeft, rep.tensors = tuneSteps, unfinished, len(layers)
	if r.Rank() == 0 {
		rep.print(out, o)
	}
	return rep, b.rankReport(ctx, r, o, t, probes, out)
}

// newBench builds the model of the layers' shapes, every rank starting
// from rank 0's parameters, and its SGD wrapped in a DistributedOptimizer
// (with the options' gradient compression) over the tracked collectives.
func newBench(ctx context.Context, o options, r *hvd.Runtime, layers []layer) (*bench, error) {
	coll, err := optim.FromRuntime(r)
	if err != nil {
		return nil, err
	}
	b := &bench{m: newModel(layers), tr: &tracker{Collectives: coll}}
	if err := optim.BroadcastParameters(ctx, coll, b.m.params, 0); err != nil {
		return nil, err
	}
	if b.inner, err = optim.NewSGD(b.m.params, optim.SGDConfig{LR: o.lr}); err != nil {
		return nil, err
	}
	var tr optim.Collectives = b.tr
	if _, ok := coll.(optim.ReduceGroupCollectives); !ok {
		tr = struct{ optim.Collectives }{b.tr} // hides NewReduceGroup
	}
	dopts := []optim.DistOption{optim.BucketBytes(o.bucketBytes), optim.FlatGradients(o.flat)}
	if o.psgdRank > 0 {
		h, err := optim.NewPowerSGD(optim.PowerSGDConfig{MatrixApproximationRank: o.psgdRank, StartPowerSGDIter: o.psgdStart})
		if err != nil {
			return nil, err
		}
		dopts = append(dopts, optim.WithCommHook(h))
	}
	if o.byteGrad {
		dopts = append(dopts, optim.WithCommHook(optim.NewByteGrad(optim.ByteGradConfig{})))
	}
	if b.opt, err = optim.NewDistributed(b.inner, tr, dopts...); err != nil {
		return nil, err
	}
	return b, nil
}

// step takes one training step: the backward, handing each gradient to
// the optimizer, then the optimizer's step. It returns what backward
// reports of the allreduces completed during its compute.
func (b *bench) step(ctx context.Context) (float64, bool, error) {
	reduced, first, err := b.backward(true)
	if err == nil {
		err = b.opt.StepContext(ctx)
	}
	if err == nil && b.firstStep.IsZero() {
		b.firstStep = time.Now()
	}
	return reduced, first, err
}

// tune warms up while autotuning runs, since the settings move until it
// has finished on every rank (the ranks agree on the step: each learns it
// at a cycle of its own, so they take the maximum), most steps at most. It
// returns the steps it took.
func (b *bench) tune(ctx context.Context, r *hvd.Runtime, most int) (int, error) {
	flag := tensor.New(tensor.Int32, 1)
	steps := 0
	for ; steps < most; steps++ {
		flag.Int32s()[0] = 0
		if r.Stats().Tuning {
			flag.Int32s()[0] = 1
		}
		if err := r.AllreduceInPlace(ctx, flag, "synthetic.tuning", hvd.Max); err != nil {
			return steps, err
		}
		if flag.Int32s()[0] == 0 {
			break
		}
		if _, _, err := b.step(ctx); err != nil {
			return steps, err
		}
	}
	return steps, nil
}

// timing is what the timed steps measured on this rank.
type timing struct {
	stepTimes, iterRates []float64 // each step's milliseconds; each iteration's steps per second
	rate                 float64   // steps per second over all timed steps
	reducedSum           float64   // of backward's shares of allreduces completed
	firstCount           int       // steps whose first allreduce completed in backward
	bytesPerStep         float64   // allreduced through the tracker
	sentPerStep          float64   // by the runtime's count
	cpu                  float64   // CPU seconds of the process
	cpuKnown             bool
}

// timeSteps runs the timed iterations of steps.
func (b *bench) timeSteps(ctx context.Context, r *hvd.Runtime, o options) (t timing, err error) {
	bytesBefore := b.tr.bytes.Load()
	sentBefore := r.Stats().SentBytes
	timed := time.Now()
	cpu0, cpuKnown := cputime.Seconds()
	for range o.iterations {
		iterStart := time.Now()
		for range o.batches {
			s := time.Now()
			reduced, first, err := b.step(ctx)
			if err != nil {
				return t, err
			}
			t.stepTimes = append(t.stepTimes, msSince(s))
			t.reducedSum += reduced
			if first {
				t.firstCount++
			}
		}
		t.iterRates = append(t.iterRates, float64(o.batches)/time.Since(iterStart).Seconds())
	}
	t.rate = float64(o.batches*o.iterations) / time.Since(timed).Seconds()
	cpu1, cpuRead := cputime.Seconds()
	t.cpu, t.cpuKnown = cpu1-cpu0, cpuKnown && cpuRead
	steps := float64(len(t.stepTimes))
	t.bytesPerStep = float64(b.tr.bytes.Load()-bytesBefore) / steps
	t.sentPerStep = float64(r.Stats().SentBytes-sentBefore) / steps
	return t, nil
}

// parts measures each part of a step alone, n times each, and returns the
// medians in milliseconds: the backward's compute, the communication
// (backward without compute, then waiting for the reductions), and the
// update.
func (b *bench) parts(ctx context.Context, r *hvd.Runtime, n int) (ms [3]float64, err error) {
	if err := r.Barrier(ctx); err != nil {
		return ms, err
	}
	var ts []float64
	for range n {
		s := time.Now()
		b.backward(false)
		ts = append(ts, msSince(s))
	}
	ms[0] = median(ts)
	if err := r.Barrier(ctx); err != nil {
		return ms, err
	}
	passes := b.passes
	b.passes = 0
	ts = ts[:0]
	for range n {
		s := time.Now()
		if _, _, err := b.backward(true); err != nil {
			return ms, err
		}
		if err := b.opt.Synchronize(ctx); err != nil {
			return ms, err
		}
		ts = append(ts, msSince(s))
	}
	b.passes = passes
	ms[1] = median(ts)
	ts = ts[:0]
	for range n {
		s := time.Now()
		if err := b.inner.Step(); err != nil {
			return ms, err
		}
		ts = append(ts, msSince(s))
	}
	ms[2] = median(ts)
	return ms, nil
}

// combine combines the ranks' measurements into the report: rates by
// rank, timings averaged.
func (b *bench) combine(ctx context.Context, r *hvd.Runtime, o options, t timing, parts [3]float64) (rep report, err error) {
	rank, size := r.Rank(), r.Size()
	rates := make([]float64, 2*size)
	rates[rank] = t.rate
	rates[size+rank] = ci95(t.iterRates)
	rt := tensor.FromFloat64(rates)
	if err := r.AllreduceInPlace(ctx, rt, "synthetic.rates", hvd.Sum); err != nil {
		return rep, err
	}
	steps := float64(len(t.stepTimes))
	stepMean := 1000 / t.rate
	stepMax := slices.Max(t.stepTimes)
	mt := tensor.FromFloat64([]float64{median(t.stepTimes), stepMean, stepMax, parts[0], parts[1], parts[2], t.reducedSum / steps, float64(t.firstCount) / steps,
		t.cpu})
	if err := r.AllreduceInPlace(ctx, mt, "synthetic.times", hvd.Average); err != nil {
		return rep, err
	}
	v := mt.Float64s()
	rep = report{ranks: size, elements: b.m.total, passes: b.passes,
		rankSteps: rt.Float64s()[:size], rankCI: rt.Float64s()[size:],
		stepMS: v[0], stepMeanMS: v[1], stepMaxMS: v[2], computeMS: v[3], commMS: v[4], updateMS: v[5],
		reducedInBackward: v[6], firstReducedEarly: v[7], bytesPerStep: t.bytesPerStep, sentPerStep: t.sentPerStep}
	if t.cpuKnown {
		// The mean of the ranks' CPU seconds in the timed steps, times
		// the ranks, over the samples all ranks trained in them.
		rep.cpuMSPerSample = 1000 * v[8] * float64(size) / (steps * float64(size*o.batchSize))
	}
	st := r.Stats()
	rep.fusedInPlace, rep.fusedCopied = st.FusedInPlace, st.FusedCopied
	for _, s := range rep.rankSteps {
		rep.totalSteps += s
	}
	rep.samples = rep.totalSteps * float64(o.batchSize)
	if o.partSteps > 0 {
		rep.hiddenMS = rep.computeMS + rep.commMS + rep.updateMS - rep.stepMS
		// With no compute asked for, there is nothing to overlap with.
		if lo := min(rep.computeMS, rep.commMS); o.computeMS > 0 && lo > 0 {
			rep.overlap = rep.hiddenMS / lo
		}
	}
	return rep, nil
}

// print writes the report as key=value lines.
func (rep report) print(w io.Writer, o options) {
	model := o.model
	if o.shapes != "" {
		model = o.shapes
	}
	p := func(k string, v any) { fmt.Fprintf(w, "%s=%v\n", k, v) }
	f := func(k string, v float64) { fmt.Fprintf(w, "%s=%.6g\n", k, v) }
	p("model", model)
	p("ranks", rep.ranks)
	p("tensors", rep.tensors)
	p("elements", rep.elements)
	f("mib", float64(rep.elements)*4/(1<<20))
	f("compute_ms_target", o.computeMS)
	f("passes", rep.passes)
	if rep.tuneSteps > 0 || rep.tuneLeft {
		p("autotune_warmup_steps", rep.tuneSteps)
		p("autotuning_unfinished", rep.tuneLeft)
	}
	p("steps", o.batches*o.iterations)
	for i, s := range rep.rankSteps {
		f(fmt.Sprintf("rank.%d.steps_per_s", i), s)
		f(fmt.Sprintf("rank.%d.steps_per_s_ci95", i), rep.rankCI[i])
	}
	f("steps_per_s_per_rank", rep.totalSteps/float64(rep.ranks))
	f("steps_per_s_total", rep.totalSteps)
	f("samples_per_s_total", rep.samples)
	if rep.cpuMSPerSample > 0 {
		f("cpu_ms_per_sample", rep.cpuMSPerSample)
	}
	f("step_ms", rep.stepMS)
	f("step_ms_mean", rep.stepMeanMS)
	f("step_ms_max", rep.stepMaxMS)
	if o.partSteps > 0 {
		f("compute_ms", rep.computeMS)
		f("comm_ms", rep.commMS)
		f("update_ms", rep.updateMS)
		f("serial_ms", rep.computeMS+rep.commMS+rep.updateMS)
		f("hidden_ms", rep.hiddenMS)
		f("overlap", rep.overlap)
	}
	f("powersgd_rank", float64(o.psgdRank))
	p("bytegrad", o.byteGrad)
	f("allreduced_mib_per_step", rep.bytesPerStep/(1<<20))
	f("sent_mib_per_step", rep.sentPerStep/(1<<20))
	f("reduced_in_backward", rep.reducedInBackward)
	f("first_reduced_early", rep.firstReducedEarly)
	f("fused_in_place_mib", float64(rep.fusedInPlace)/(1<<20))
	f("fused_copied_mib", float64(rep.fusedCopied)/(1<<20))
}

func msSince(t time.Time) float64 { return float64(time.Since(t)) / float64(time.Millisecond) }

// median returns the median of xs (0 for none); xs is sorted in place.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// ci95 returns 1.96 standard deviations of xs (Horovod's "+-" figure).
func ci95(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	var mean, ss float64
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return 1.96 * math.Sqrt(ss/float64(len(xs)-1))
}

// Alltoall passes through to the runtime's, for ByteGrad's exchange.
func (t *tracker) Alltoall(ctx context.Context, x *tensor.Tensor, splits []int, name string) (*tensor.Tensor, []int, error) {
	ac, ok := t.Collectives.(optim.AlltoallCollectives)
	if !ok {
		return nil, nil, errors.New("synthetic: the collectives have no alltoall")
	}
	return ac.Alltoall(ctx, x, splits, name)
}

// Allgather passes through to the runtime's, for ByteGrad's exchange.
func (t *tracker) Allgather(ctx context.Context, x *tensor.Tensor, name string) (*tensor.Tensor, error) {
	gc, ok := t.Collectives.(optim.GatherCollectives)
	if !ok {
		return nil, errors.New("synthetic: the collectives have no allgather")
	}
	return gc.Allgather(ctx, x, name)
}

// Rank passes through to the runtime's (-1 where it has none).
func (t *tracker) Rank() int {
	if r, ok := t.Collectives.(optim.Ranker); ok {
		return r.Rank()
	}
	return -1
}
