package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	goruntime "runtime"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/gohorovod/gohorovod/examples/internal/mnist"
	"github.com/gohorovod/gohorovod/internal/cputime"
	"github.com/gohorovod/gohorovod/internal/mlp"
	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/optim/data"
	"github.com/gohorovod/gohorovod/optim/nn"
	"github.com/gohorovod/gohorovod/optim/preempt"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

// options are the command-line settings.
type options struct {
	epochs    int
	batch     int     // per rank
	lr        float64 // single-process learning rate; scaled by the number of ranks
	momentum  float64
	wd        float64
	warmup    float64 // epochs of gradual warmup (Goyal et al.) when running on several ranks
	hidden    string
	seed      uint64
	dataDir   string
	limit     int    // use only the first limit training images (0: all)
	profile   string // CPU profile file (each rank appends .rank)
	compress  string // gradient compression: none, fp16, bf16
	psgdRank  int    // PowerSGD's rank (0: off)
	psgdFrom  int    // PowerSGD's start iteration: steps of plain averaging first
	groups    int    // parameter groups (0: buckets of bucket bytes)
	bucket    int    // the DistributedOptimizer's BucketBytes
	flat      bool   // the DistributedOptimizer's FlatGradients
	elastic   bool   // elastic training (optim/elastic)
	every     int    // elastic: commit every this many steps (and at each epoch's end)
	ckptDir   string // checkpoint directory: resume from it, write to it ("": none)
	ckptEvery int    // write a checkpoint every this many steps
	norm      string // batch normalisation after each hidden layer: none, local, sync
	// Test hooks, set by no flag: stopAt stops the stateful loop (with
	// errStopped) before step stopAt+1, as a kill would; observe sees every
	// step's batch on every rank.
	stopAt  int
	observe func(rank, epoch, step int, idx []int)
	// Post-local SGD: synchronous steps before local SGD (-1: off), the
	// global averaging period, and the period of averaging within each
	// node (0: none).
	localStart, period, nodePeriod int
	// How the ranks combine their gradients (algorithm.go): the
	// --algorithm, ByteGrad's error feedback, QAdam's warm-up steps, and
	// ZeRO's stage (0: off).
	algorithm     string
	errorFeedback bool
	qadamWarmup   int
	adamEps       float64
	zero          int
	// The weight algorithms' settings (decentralized, low-precision,
	// async: weights.go).
	alg algorithmOptions
}

// parse reads the command line and checks the options.
func parse(args []string) (options, error) {
	var o options
	fs := pflag.NewFlagSet("mnist", pflag.ContinueOnError)
	o.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.alg.name = o.algorithm
	if o.algorithm == "qadam" && !fs.Changed("lr") {
		o.lr = 0.001 // Adam's rate, not SGD's
	}
	err := o.check()
	return o, err
}

// addFlags defines the command's flags on fs, each setting its field of o.
func (o *options) addFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.epochs, "epochs", 3, "training epochs")
	fs.IntVar(&o.batch, "batch", 64, "batch size per rank")
	fs.Float64Var(&o.lr, "lr", 0.05, "learning rate of one process; scaled by the number of ranks (with warmup), then decayed along a cosine to zero at the end of the last epoch, which therefore prints lr 0")
	fs.Float64Var(&o.momentum, "momentum", 0.9, "SGD momentum")
	fs.Float64Var(&o.wd, "weight-decay", 1e-4, "weight decay")
	fs.Float64Var(&o.warmup, "warmup-epochs", 1, "epochs of linear learning-rate warmup from lr to lr·size")
	fs.StringVar(&o.hidden, "hidden", "256,128", "hidden layer widths")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the weights and of the shuffling")
	fs.StringVar(&o.dataDir, "data", "", "directory of the MNIST gzip files (default: the GoMNIST module's)")
	fs.IntVar(&o.limit, "train-limit", 0, "train on the first N images only (0: all 60000)")
	fs.StringVar(&o.compress, "compression", "none", "gradient compression: none, fp16 or bf16")
	fs.IntVar(&o.psgdRank, "powersgd-rank", 0, "compress the gradient matrices with PowerSGD at this rank (0: off)")
	fs.IntVar(&o.psgdFrom, "powersgd-start", 0, "with --powersgd-rank: average the gradients uncompressed for the first N steps")
	fs.IntVar(&o.groups, "groups", 0, "reduce the parameters in this many groups (0: in buckets of --bucket-bytes, overlapping backward)")
	fs.IntVar(&o.bucket, "bucket-bytes", optim.DefaultBucketBytes, "gradients per reduction bucket, in bytes (0: one bucket per gradient)")
	fs.BoolVar(&o.flat, "flat-gradients", true, "move the gradients into one flat buffer (optim.FlatGradients), which the runtime reduces where it lies")
	fs.BoolVar(&o.elastic, "elastic", false, "elastic training: survive lost workers and follow added or removed hosts (launch with gohorovodrun's --min-np, --max-np or --host-discovery-script)")
	fs.IntVar(&o.every, "commit-every", 10, "with --elastic: commit the training state every N steps (and at the end of each epoch)")
	fs.StringVar(&o.ckptDir, "checkpoint-dir", "", "resume from the newest valid checkpoint in `dir` (if any) and write checkpoints there: the model, the optimizer, the sampler's position and the progress")
	fs.IntVar(&o.ckptEvery, "checkpoint-every", 100, "with --checkpoint-dir: write a checkpoint every N steps (with --elastic, a multiple of --commit-every)")
	fs.StringVar(&o.norm, "batchnorm", "none", "batch normalisation after each hidden layer (before its ReLU): none, local (each rank's batch) or sync (the batch of all ranks, over the optimizer's collectives)")
	fs.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of the training to `file`.RANK")
	fs.IntVar(&o.localStart, "local-sgd-start", -1, "post-local SGD: after N synchronous steps, step on each rank's own gradients and average the parameters every --averaging-period steps (-1: off, always synchronous; 0: local from the first step)")
	fs.IntVar(&o.period, "averaging-period", 4, "with --local-sgd-start: average the parameters across all ranks every K local steps")
	fs.IntVar(&o.nodePeriod, "hierarchical-period", 0, "with --local-sgd-start: also average within each node every K1 local steps (K1 divides --averaging-period; 0: off)")
	fs.StringVar(&o.algorithm, "algorithm", "gradient_allreduce", "how the ranks combine their gradients, or their weights: "+algorithmNames()+" (see docs/TRAINING.md)")
	fs.BoolVar(&o.errorFeedback, "error-feedback", false, "with --algorithm bytegrad: keep what the 8-bit quantization lost and add it to the next step's")
	fs.IntVar(&o.qadamWarmup, "qadam-warmup", 200, "with --algorithm qadam: steps of plain Adam on allreduced gradients before the second moment is frozen")
	fs.Float64Var(&o.adamEps, "qadam-eps", 1e-5, "with --algorithm qadam: Adam's eps, added to the frozen second moment's root (Adam's 1e-8 lets the 8-bit momenta's error blow up the weights that the warm-up saw no gradient for)")
	fs.IntVar(&o.zero, "zero", 0, "shard the optimizer state (ZeRO stage 1 or 2; 0: off), with --algorithm gradient_allreduce")
	addAlgorithmFlags(fs, &o.alg)
}

// check refuses options that do not go together (checkCheckpoint may
// settle a default).
func (o *options) check() error {
	if err := o.checkAlgorithm(); err != nil {
		return err
	}
	if o.epochs < 1 || o.batch < 1 || o.lr <= 0 || o.warmup <= 0 {
		return errors.New("mnist: --epochs, --batch, --lr and --warmup-epochs must be positive")
	}
	if _, err := o.compression(); err != nil {
		return err
	}
	switch {
	case o.psgdRank < 0 || o.psgdFrom < 0:
		return errors.New("mnist: --powersgd-rank and --powersgd-start must not be negative")
	case o.psgdRank > 0 && o.compress != "none":
		return errors.New("mnist: --powersgd-rank and --compression are two gradient compressions: choose one")
	}
	if o.groups < 0 || o.bucket < 0 {
		return errors.New("mnist: --groups and --bucket-bytes must not be negative")
	}
	if o.every < 1 {
		return errors.New("mnist: --commit-every must be positive")
	}
	switch o.norm {
	case "none":
	case "local", "sync":
		if o.elastic {
			// The elastic state holds the parameters, not the running
			// statistics, and its last step skips ranks without rows.
			return errors.New("mnist: --batchnorm does not work with --elastic")
		}
	default:
		return fmt.Errorf("mnist: unknown --batchnorm %q (none, local, sync)", o.norm)
	}
	if err := o.checkLocalSGD(); err != nil {
		return err
	}
	return o.checkCheckpoint()
}

// newModel returns the MLP, with batch normalisation after each hidden
// layer as --batchnorm says (local, or synchronised over coll), and the
// batch norm layers.
func (o options) newModel(widths []int, coll optim.Collectives) (*mlp.MLP, []*nn.BatchNorm[float32], error) {
	if o.norm == "none" {
		return mlp.New(widths, o.seed), nil, nil
	}
	var bnOpts []nn.Option
	if o.norm == "sync" {
		bnOpts = append(bnOpts, nn.Sync(coll))
	}
	var bns []*nn.BatchNorm[float32]
	var norms []mlp.Norm
	for l, w := range widths[1 : len(widths)-1] {
		bn, err := nn.NewBatchNorm[float32](fmt.Sprintf("bn%d", l+1), w, bnOpts...)
		if err != nil {
			return nil, nil, err
		}
		bns, norms = append(bns, bn), append(norms, bn)
	}
	return mlp.New(widths, o.seed, mlp.WithNorms(norms...)), bns, nil
}

// checkLocalSGD checks the post-local SGD flags.
func (o options) checkLocalSGD() error {
	switch {
	case o.localStart < -1:
		return fmt.Errorf("mnist: --local-sgd-start %d: -1 (off) or the number of synchronous steps", o.localStart)
	case o.period < 1:
		return fmt.Errorf("mnist: --averaging-period %d must be positive", o.period)
	case o.nodePeriod < 0:
		return fmt.Errorf("mnist: --hierarchical-period %d must not be negative", o.nodePeriod)
	case o.nodePeriod > 0 && (o.nodePeriod >= o.period || o.period%o.nodePeriod != 0):
		return fmt.Errorf("mnist: --averaging-period %d must be a larger multiple of --hierarchical-period %d", o.period, o.nodePeriod)
	case o.localStart < 0 && o.nodePeriod > 0:
		return errors.New("mnist: --hierarchical-period needs --local-sgd-start")
	case o.localStart >= 0 && o.elastic:
		return errors.New("mnist: --local-sgd-start is not supported with --elastic")
	}
	return nil
}

// localSGD reports whether post-local SGD is on.
func (o options) localSGD() bool { return o.localStart >= 0 }

func (o options) compression() (optim.Compression, error) {
	for _, c := range []optim.Compression{optim.NoCompression, optim.FP16, optim.BF16} {
		if c.String() == o.compress {
			return c, nil
		}
	}
	return 0, fmt.Errorf("mnist: unknown --compression %q (none, fp16, bf16)", o.compress)
}

func (o options) widths() ([]int, error) {
	hidden, err := mlp.ParseWidths(o.hidden)
	if err != nil {
		return nil, fmt.Errorf("mnist: %w", err)
	}
	return append(append([]int{mnist.Pixels}, hidden...), mnist.Classes), nil
}

func main() {
	o, err := parse(os.Args[1:])
	if err == nil {
		var opts []hvd.Option
		if o.nodePeriod > 0 || o.alg.hierarchical {
			opts = append(opts, hvd.WithDynamicProcessSets()) // for the node sets
		}
		err = hvd.Init(opts...) // over MPI under mpirun or gohorovodrun, else one rank
		if err == nil {
			var stop func() error
			if stop, err = setup(o, hvd.Default()); err == nil {
				if o.stateful() {
					_, err = runStateful(context.Background(), o, hvd.Default(), os.Stdout)
				} else {
					_, err = run(context.Background(), o, hvd.Default(), os.Stdout)
				}
				if perr := stop(); err == nil {
					err = perr
				}
			}
			if serr := hvd.Shutdown(); err == nil {
				err = serr
			}
		}
	}
	if errors.Is(err, hvd.ErrRemoved) {
		// The elastic job re-formed without this worker (its host was
		// removed or blacklisted, or the job is at --max-np): its part is
		// done, and the launcher no longer counts it.
		fmt.Println("mnist: removed from the elastic job")
		return
	}
	if err != nil && !errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintln(os.Stderr, err)
		// 99 when told to stop and stopped with a checkpoint (preempted).
		os.Exit(preempt.ExitCode(err))
	}
}

// setup gives the process its share of the host's cores (unless GOMAXPROCS
// is set) and starts the CPU profile if asked; the returned function stops
// the profile.
func setup(o options, r *hvd.Runtime) (func() error, error) {
	local := r.LocalSize()
	if os.Getenv("GOMAXPROCS") == "" {
		goruntime.GOMAXPROCS(coreShare(goruntime.NumCPU(), local))
	}
	if o.profile == "" {
		return func() error { return nil }, nil
	}
	return cputime.Profile(fmt.Sprintf("%s.%d", o.profile, r.Rank()))
}

// coreShare is the GOMAXPROCS of one of local ranks on a host with cpus
// cores: an equal share, at least one.
func coreShare(cpus, local int) int {
	return max(1, cpus/max(1, local))
}

// result is what a training run ends with (the same on every rank, except
// the elastic measurements).
type result struct {
	loss, accuracy float64 // of the last epoch: mean training loss, test accuracy
	// cpuPerSample is the last epoch's CPU seconds per sample, every
	// rank's summed (each rank's process CPU time over its steps: ranks
	// that share one process, as in the tests, each count all of it).
	cpuPerSample float64
	checksum     uint64 // FNV-1a of the final parameters: equal on every rank
	running      uint64 // FNV-1a of the batch norms' running statistics: equal on every rank with sync

	// With --elastic only: this process's commits, the time they took, and
	// the time it spent in the training loops (commits included, evaluation
	// not), and the size and rendezvous round at the end.
	commits               int
	commitTime, trainTime time.Duration
	size, round           int
}

// run trains and evaluates on the initialised runtime r, printing progress
// to out on rank 0.
func run(ctx context.Context, o options, r *hvd.Runtime, out io.Writer) (res result, err error) {
	if o.alg.weights() {
		return runWeights(ctx, o, r, out) // weights.go
	}
	s, err := begin(ctx, o, r)
	if err != nil {
		return res, err
	}
	l := &gradientLoop{o: o, r: r, basis: s}
	if l.opt, l.local, l.psgd, err = newTrainer(ctx, o, r, s.model, s.coll); err != nil {
		return res, err
	}
	defer func() {
		if cerr := l.opt.Close(); err == nil {
			err = cerr
		}
	}()
	l.measure()
	if r.Rank() == 0 {
		l.announce(out)
	}
	for epoch := range o.epochs {
		if res, err = l.epoch(ctx, epoch, out); err != nil {
			return res, err
		}
	}
	res.checksum = checksum(s.model)
	res.running = runningChecksum(s.bns)
	return res, nil
}

// basis is what every training run begins with: the collectives over the
// runtime, the data, the model (every rank holding rank 0's weights), the
// sampler of this rank's batches and the learning rate's schedule.
type basis struct {
	coll        optim.Collectives
	train, test *mnist.Set
	widths      []int
	model       *mlp.MLP
	bns         []*nn.BatchNorm[float32]
	sampler     *data.Sampler
	sched       optim.Schedule
}

// begin loads the data, builds the model as the options say and
// broadcasts rank 0's weights.
func begin(ctx context.Context, o options, r *hvd.Runtime) (s basis, err error) {
	if s.coll, err = optim.FromRuntime(r); err != nil {
		return s, err
	}
	if s.train, s.test, s.widths, err = load(o); err != nil {
		return s, err
	}
	if s.model, s.bns, err = o.newModel(s.widths, s.coll); err != nil {
		return s, err
	}
	// Every rank starts from rank 0's weights.
	if err := optim.BroadcastParameters(ctx, s.coll, s.model.Params(), 0); err != nil {
		return s, err
	}
	s.sched = o.schedule(r.Size())
	s.sampler, err = data.NewSampler(s.train.Len(), r.Rank(), r.Size(), data.Shuffle(true, o.seed))
	return s, err
}

// gradientLoop is the training loop of the algorithms that combine
// gradients: the optimizer (with its post-local SGD and PowerSGD parts,
// if any) and what it counts of the bytes moved.
type gradientLoop struct {
	o options
	r *hvd.Runtime
	basis
	opt   trainer
	local *optim.PostLocalSGD
	psgd  *optim.PowerSGD
	// bytes of the parameters (and of the gradients); normBytes allreduced
	// per step by the sync batch norms; steps taken so far.
	bytes, normBytes, steps int
}

// measure counts the parameters' bytes and what the sync batch norms
// allreduce per step (each one's two allreduces of 1+2C float64s).
func (l *gradientLoop) measure() {
	for _, p := range l.model.Params() {
		l.bytes += p.Value.NumBytes()
	}
	if l.o.norm == "sync" {
		for _, bn := range l.bns {
			l.normBytes += 2 * (1 + 2*bn.Features()) * 8
		}
	}
}

// announce prints the run's first lines: the job and model, and how the
// gradients or parameters travel.
func (l *gradientLoop) announce(out io.Writer) {
	o, size, bytes := l.o, l.r.Size(), l.bytes
	wire := o.gradientWire(bytes)
	fmt.Fprintf(out, "mnist: %d ranks, MLP %v, batch norm %s, batch %d per rank, lr %g·%d, %d epochs\n", size, l.widths, o.norm, o.batch, o.lr, size, o.epochs)
	switch {
	case l.local != nil:
		fmt.Fprintf(out, "post-local SGD: %d synchronous steps, then the parameters (%d bytes) averaged every %d steps%s, the gradients (%d bytes) allreduced every step before%s\n",
			o.localStart, bytes, o.period, o.nodePeriodText(), bytes, wire)
	case o.algorithm == "gradient_allreduce" && o.zero == 0:
		fmt.Fprintf(out, "synchronous SGD: the gradients (%d bytes) allreduced every step%s\n", bytes, wire)
	default:
		fmt.Fprintf(out, "%s: the gradients are %d bytes\n", o.describe(), bytes)
	}
}

// epochTally is what an epoch's steps measured on this rank: the loss,
// the time in Step (waiting for the reductions, then the update), and the
// bytes allreduced (within its node too).
type epochTally struct {
	loss     optim.Metric
	stepTime time.Duration
	moved    int
}

// epoch trains one epoch, evaluates the model and prints the epoch's line
// on rank 0.
func (l *gradientLoop) epoch(ctx context.Context, epoch int, out io.Writer) (result, error) {
	rank, size := l.r.Rank(), l.r.Size()
	l.sampler.SetEpoch(epoch)
	// Batch norm cannot train on a last batch of one row: drop the short
	// last batch then (every rank has the same batches).
	batches := l.sampler.Batches(l.o.batch, l.o.norm != "none")
	start := time.Now()
	cpu0, cpuKnown := cputime.Seconds()
	tuning := l.r.Stats().Tuning   // autotuning still moves the settings during this epoch
	sent0 := l.r.Stats().SentBytes // the runtime's count of the bytes this rank sent
	tally, err := l.trainOn(epoch, batches)
	if err != nil {
		return result{}, err
	}
	sent := l.r.Stats().SentBytes - sent0
	if l.local != nil && !l.local.Averaged() {
		tally.moved += l.bytes
		// Evaluate (and end with) one model: the replicas differ between
		// averagings.
		if err := l.local.AverageNow(ctx); err != nil {
			return result{}, err
		}
	}
	elapsed := time.Since(start)
	cpu1, cpuRead := cputime.Seconds()
	// This process's CPU seconds in the epoch's steps over its samples;
	// averaged over the ranks it is the job's CPU seconds per sample,
	// every rank's summed.
	cpu := optim.Metric{Name: "cpu", Sum: cpu1 - cpu0, Weight: tally.loss.Weight}
	res, err := evaluateAll(ctx, l.coll, l.model, l.test, &tally.loss, &cpu)
	if err != nil || rank != 0 {
		return res, err
	}
	note := ""
	if tuning {
		note = "  (autotuning)"
	}
	cpuText := ""
	if cpuKnown && cpuRead {
		cpuText = fmt.Sprintf("  %.4g CPU-ms/sample (all ranks)", 1000*res.cpuPerSample)
	}
	fmt.Fprintf(out, "epoch %d: loss %.4f  test accuracy %.2f%%  %.1fs (%.0f%% in Step)  %.0f samples/s%s  %.0f KiB allreduced/step  %.0f KiB sent/step  lr %.4g%s\n",
		epoch+1, res.loss, 100*res.accuracy, elapsed.Seconds(), 100*tally.stepTime.Seconds()/elapsed.Seconds(),
		float64(size)*tally.loss.Weight/elapsed.Seconds(), cpuText, float64(tally.moved)/1024/float64(len(batches)), float64(sent)/1024/float64(len(batches)), l.opt.LR(), note)
	return res, nil
}

// trainOn takes the epoch's steps over batches.
func (l *gradientLoop) trainOn(epoch int, batches [][]int) (epochTally, error) {
	t := epochTally{loss: optim.Metric{Name: "loss"}}
	x := make([]float32, l.o.batch*mnist.Pixels)
	y := make([]uint8, l.o.batch)
	for b, idx := range batches {
		l.opt.SetLR(l.sched.LR(float64(epoch) + float64(b+1)/float64(len(batches))))
		fillBatch(l.train, idx, x, y)
		n := len(idx)
		var sent int64 // by PowerSGD before this step, whose buckets start in backward
		if l.psgd != nil {
			sent = l.psgd.BytesAllreduced()
		}
		if err := l.opt.ZeroGrad(); err != nil {
			return t, err
		}
		if _, err := l.model.Forward(x, n); err != nil {
			return t, err
		}
		loss, _ := l.model.Loss(y[:n])
		if err := l.model.Backward(l.opt.Ready); err != nil {
			return t, err
		}
		synchronous := l.local == nil || !l.local.Local()
		t0 := time.Now()
		if err := l.opt.Step(); err != nil {
			return t, err
		}
		t.stepTime += time.Since(t0)
		grads := l.o.gradientBytes(l.bytes)
		if !l.o.allreduces(l.steps) {
			grads = 0
		}
		l.steps++
		if l.psgd != nil {
			grads = int(l.psgd.BytesAllreduced() - sent)
		}
		t.moved += stepBytes(l.local, synchronous, grads, l.bytes) + l.normBytes
		t.loss.Add(loss, float64(n))
	}
	return t, nil
}

// fillBatch copies the images and labels of the samples idx of set into
// the batch buffers x and y.
func fillBatch(set *mnist.Set, idx []int, x []float32, y []uint8) {
	for i, s := range idx {
		copy(x[i*mnist.Pixels:(i+1)*mnist.Pixels], set.Image(s))
		y[i] = set.Labels[s]
	}
}

// evaluateAll evaluates model on this rank's share of test and returns
// the means over every rank's samples of loss, the test accuracy and, if
// given, cpu.
func evaluateAll(ctx context.Context, coll optim.Collectives, model *mlp.MLP, test *mnist.Set, loss *optim.Metric, cpu *optim.Metric) (result, error) {
	correct, count, err := evaluate(model, test, coll.(optim.Ranker).Rank(), coll.Size())
	if err != nil {
		return result{}, err
	}
	acc := optim.Metric{Name: "accuracy"}
	acc.Add(float64(correct)/float64(count), float64(count))
	metrics := []*optim.Metric{loss, &acc}
	if cpu != nil {
		metrics = append(metrics, cpu)
	}
	v, err := optim.AverageMetrics(ctx, coll, metrics...)
	if err != nil {
		return result{}, err
	}
	res := result{loss: v[0], accuracy: v[1]}
	if cpu != nil {
		res.cpuPerSample = v[2]
	}
	return res, nil
}

// runningChecksum is the FNV-1a hash of the batch norms' running
// statistics (0 without).
func runningChecksum(bns []*nn.BatchNorm[float32]) uint64 {
	if len(bns) == 0 {
		return 0
	}
	h := fnv.New64a()
	for _, bn := range bns {
		for _, s := range [][]float32{bn.RunningMean(), bn.RunningVar()} {
			for _, v := range s {
				h.Write(binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)))
			}
		}
	}
	return h.Sum64()
}

// checksum is the FNV-1a hash of the model's parameters.
func checksum(model *mlp.MLP) uint64 {
	h := fnv.New64a()
	for _, p := range model.Params() {
		h.Write(p.Value.Bytes())
	}
	return h.Sum64()
}

// load reads the training set (its first --train-limit images) and the
// test set, and returns them with the model's layer widths.
func load(o options) (train, test *mnist.Set, widths []int, err error) {
	dir := o.dataDir
	if dir == "" {
		if dir, err = mnist.Dir(); err != nil {
			return nil, nil, nil, err
		}
	}
	if train, test, err = loadOnce(dir); err != nil {
		return nil, nil, nil, err
	}
	if widths, err = o.widths(); err != nil {
		return nil, nil, nil, err
	}
	if o.limit > 0 && o.limit < train.Len() {
		train = &mnist.Set{Images: train.Images[:o.limit*mnist.Pixels], Labels: train.Labels[:o.limit]}
	}
	return train, test, widths, nil
}

// loaded holds the sets read from each directory: ranks that share a
// process (hvd.RunLocal, as in the tests) read and decompress the files
// once. Nothing writes to a loaded set.
var loaded struct {
	sync.Mutex
	sets map[string][2]*mnist.Set
}

// loadOnce returns the training and test sets of dir, read on the first
// call for dir.
func loadOnce(dir string) (train, test *mnist.Set, err error) {
	loaded.Lock()
	defer loaded.Unlock()
	if s, ok := loaded.sets[dir]; ok {
		return s[0], s[1], nil
	}
	if train, test, err = mnist.Load(dir); err != nil {
		return nil, nil, err
	}
	if loaded.sets == nil {
		loaded.sets = map[string][2]*mnist.Set{}
	}
	loaded.sets[dir] = [2]*mnist.Set{train, test}
	return train, test, nil
}

// newOptimizer returns the --algorithm's optimizer (SGD, or QAdam) over
// the model's parameters wrapped in a DistributedOptimizer on coll:
// gradients are averaged across ranks as backward produces them, through
// the algorithm's hook if it has one. With --powersgd-rank it also
// returns the PowerSGD hook through which they travel (else nil).
func newOptimizer(o options, model *mlp.MLP, coll optim.Collectives) (*optim.DistributedOptimizer, *optim.PowerSGD, error) {
	inner, hook, err := algorithms[o.algorithm].optimizer(o, model.Params())
	if err != nil {
		return nil, nil, err
	}
	comp, _ := o.compression()
	dopts := []optim.DistOption{optim.WithCompression(comp), optim.BucketBytes(o.bucket), optim.FlatGradients(o.flat)}
	if hook != nil {
		dopts = append(dopts, optim.WithCommHook(hook))
	}
	var h *optim.PowerSGD
	if o.psgdRank > 0 {
		h, err = optim.NewPowerSGD(optim.PowerSGDConfig{MatrixApproximationRank: o.psgdRank, StartPowerSGDIter: o.psgdFrom, Seed: o.seed})
		if err != nil {
			return nil, nil, err
		}
		dopts = append(dopts, optim.WithCommHook(h))
	}
	if o.groups > 0 {
		dopts = append(dopts, optim.NumGroups(o.groups))
	}
	dist, err := optim.NewDistributed(inner, coll, dopts...)
	return dist, h, err
}

// newTrainer returns the optimizer of the training loop: the sharded one
// with --zero, else the DistributedOptimizer (newOptimizer), wrapped in
// PostLocalSGD (also returned) with --local-sgd-start; and PowerSGD's hook
// if any.
func newTrainer(ctx context.Context, o options, r *hvd.Runtime, model *mlp.MLP, coll optim.Collectives) (trainer, *optim.PostLocalSGD, *optim.PowerSGD, error) {
	if o.zero > 0 {
		z, err := newZero(o, model.Params(), coll)
		return z, nil, nil, err
	}
	dist, psgd, err := newOptimizer(o, model, coll)
	if err != nil || !o.localSGD() {
		return dist, nil, psgd, err
	}
	local, err := newLocalSGD(ctx, o, r, dist)
	if err != nil {
		dist.Close()
		return nil, nil, nil, err
	}
	return local, local, psgd, nil
}

// gradientBytes is what a synchronous step allreduces of gradients of
// bytes bytes (float32) without PowerSGD: half as many with --compression.
func (o options) gradientBytes(bytes int) int {
	if o.compress != "none" {
		return bytes / 2
	}
	return bytes
}

// gradientWire describes how the gradients travel, for the first lines
// printed.
func (o options) gradientWire(bytes int) string {
	switch {
	case o.psgdRank > 0:
		return fmt.Sprintf(", compressed by PowerSGD at rank %d after %d steps", o.psgdRank, o.psgdFrom)
	case o.compress != "none":
		return fmt.Sprintf(", as %s (%d bytes)", o.compress, o.gradientBytes(bytes))
	}
	return ""
}

// trainer is the optimizer of the training loop: the DistributedOptimizer,
// or PostLocalSGD over it.
type trainer interface {
	optim.Optimizer
	Ready(p optim.Param) error
	Close() error
}

// newLocalSGD wraps dist for post-local SGD as the options say, averaging
// within each node too with --hierarchical-period (over the runtime's node
// process sets).
func newLocalSGD(ctx context.Context, o options, r *hvd.Runtime, dist *optim.DistributedOptimizer) (*optim.PostLocalSGD, error) {
	cfg := optim.LocalSGDConfig{StartLocalSGDIter: o.localStart, ModelAveragingPeriod: o.period}
	if o.nodePeriod > 0 {
		node, err := r.AddNodeProcessSets(ctx)
		if err != nil {
			return nil, err
		}
		nodeColl, err := optim.FromProcessSet(r, node)
		if err != nil {
			return nil, err
		}
		cfg.Hierarchy = []optim.AveragingLevel{{Period: o.nodePeriod, Coll: nodeColl}}
	}
	return optim.NewPostLocalSGD(dist, cfg)
}

// stepBytes is what the step just taken allreduced on this rank: grads
// (the gradients as they travelled) in a synchronous step, the parameters
// (params bytes) in a local step that averaged (across all ranks or
// within the node), nothing in one that did not.
func stepBytes(local *optim.PostLocalSGD, synchronous bool, grads, params int) int {
	switch {
	case synchronous:
		return grads
	case local.Averager().Due(local.Steps()) >= 0:
		return params
	}
	return 0
}

// nodePeriodText describes the averaging within nodes, if any.
func (o options) nodePeriodText() string {
	if o.nodePeriod == 0 {
		return ""
	}
	return fmt.Sprintf(" (and within each node every %d)", o.nodePeriod)
}

// schedule is the learning rate over (fractional) epochs on size ranks:
// the rate is scaled by the number of ranks, warming up to it (Goyal et
// al.), then annealed to zero by the last epoch.
func (o options) schedule(size int) optim.Schedule {
	decay := optim.Constant(o.lr)
	if float64(o.epochs) > o.warmup {
		decay = optim.Cosine(o.lr, 0, o.warmup, float64(o.epochs))
	}
	return optim.Warmup(optim.Scale(decay, float64(size)), size, o.warmup)
}

// evaluate classifies the rank's share of the set (every size-th image from
// rank) and returns how many it got right, of how many. Predict runs batch
// norms in evaluation mode (running statistics; sync ones do not
// communicate, so the ranks' shares may differ in size).
func evaluate(m *mlp.MLP, set *mnist.Set, rank, size int) (correct, count int, err error) {
	const chunk = 500
	var idx []int
	for i := rank; i < set.Len(); i += size {
		idx = append(idx, i)
	}
	x := make([]float32, chunk*mnist.Pixels)
	for lo := 0; lo < len(idx); lo += chunk {
		hi := min(lo+chunk, len(idx))
		for i, s := range idx[lo:hi] {
			copy(x[i*mnist.Pixels:(i+1)*mnist.Pixels], set.Image(s))
		}
		pred, err := m.Predict(x, hi-lo)
		if err != nil {
			return 0, 0, err
		}
		for i, p := range pred {
			if p == int(set.Labels[idx[lo+i]]) {
				correct++
			}
		}
	}
	return correct, len(idx), nil
}
