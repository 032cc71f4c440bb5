package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/gohorovod/gohorovod/examples/internal/mnist"
	"github.com/gohorovod/gohorovod/internal/mlp"
	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/optim/data"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

// options are the command-line settings.
type options struct {
	epochs   int
	batch    int     // per rank
	lr       float64 // single-process learning rate; scaled by the number of ranks
	momentum float64
	wd       float64
	warmup   float64 // epochs of gradual warmup (Goyal et al.) when running on several ranks
	hidden   string
	seed     uint64
	dataDir  string
	limit    int    // use only the first limit training images (0: all)
	profile  string // CPU profile file (each rank appends .rank)
	compress string // gradient compression: none, fp16, bf16
	groups   int    // parameter groups (0: buckets of bucket bytes)
	bucket   int    // the DistributedOptimizer's BucketBytes
	elastic  bool   // elastic training (runtime/elastic)
	every    int    // elastic: commit every this many steps (and at each epoch's end)
}

func parse(args []string) (options, error) {
	var o options
	fs := pflag.NewFlagSet("mnist", pflag.ContinueOnError)
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
	fs.IntVar(&o.groups, "groups", 0, "reduce the parameters in this many groups (0: in buckets of --bucket-bytes, overlapping backward)")
	fs.IntVar(&o.bucket, "bucket-bytes", optim.DefaultBucketBytes, "gradients per reduction bucket, in bytes (0: one bucket per gradient)")
	fs.BoolVar(&o.elastic, "elastic", false, "elastic training: survive lost workers and follow added or removed hosts (launch with gohorovodrun's --min-np, --max-np or --host-discovery-script)")
	fs.IntVar(&o.every, "commit-every", 10, "with --elastic: commit the training state every N steps (and at the end of each epoch)")
	fs.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of the training to `file`.RANK")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.epochs < 1 || o.batch < 1 || o.lr <= 0 || o.warmup <= 0 {
		return o, errors.New("mnist: --epochs, --batch, --lr and --warmup-epochs must be positive")
	}
	if _, err := o.compression(); err != nil {
		return o, err
	}
	if o.groups < 0 || o.bucket < 0 {
		return o, errors.New("mnist: --groups and --bucket-bytes must not be negative")
	}
	if o.every < 1 {
		return o, errors.New("mnist: --commit-every must be positive")
	}
	return o, nil
}

func (o options) compression() (optim.Compression, error) {
	for _, c := range []optim.Compression{optim.NoCompression, optim.FP16, optim.BF16} {
		if c.String() == o.compress {
			return c, nil
		}
	}
	return 0, fmt.Errorf("mnist: unknown --compression %q (none, fp16, bf16)", o.compress)
}

func (o options) widths() ([]int, error) {
	ws := []int{mnist.Pixels}
	for _, f := range strings.Split(o.hidden, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || w < 1 {
			return nil, fmt.Errorf("mnist: bad hidden width %q", f)
		}
		ws = append(ws, w)
	}
	return append(ws, mnist.Classes), nil
}

func main() {
	o, err := parse(os.Args[1:])
	if err == nil {
		err = hvd.Init() // over MPI under mpirun or gohorovodrun, else one rank
		if err == nil {
			var stop func() error
			if stop, err = setup(o, hvd.Default()); err == nil {
				if o.elastic {
					_, err = runElastic(context.Background(), o, hvd.Default(), os.Stdout)
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
		os.Exit(1)
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
	rank := r.Rank()
	f, err := os.Create(fmt.Sprintf("%s.%d", o.profile, rank))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
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
	checksum       uint64  // FNV-1a of the final parameters: equal on every rank

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
	rank := r.Rank()
	size := r.Size()
	coll, err := optim.FromRuntime(r)
	if err != nil {
		return res, err
	}

	train, test, widths, err := load(o)
	if err != nil {
		return res, err
	}
	model := mlp.New(widths, o.seed)
	// Every rank starts from rank 0's weights.
	if err := optim.BroadcastParameters(ctx, coll, model.Params(), 0); err != nil {
		return res, err
	}
	opt, err := newOptimizer(o, model, coll)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := opt.Close(); err == nil {
			err = cerr
		}
	}()
	sched := o.schedule(size)
	sampler, err := data.NewSampler(train.Len(), rank, size, data.Shuffle(true, o.seed))
	if err != nil {
		return res, err
	}
	if rank == 0 {
		fmt.Fprintf(out, "mnist: %d ranks, MLP %v, batch %d per rank, lr %g·%d, %d epochs\n", size, widths, o.batch, o.lr, size, o.epochs)
	}
	x := make([]float32, o.batch*mnist.Pixels)
	y := make([]uint8, o.batch)
	for epoch := range o.epochs {
		sampler.SetEpoch(epoch)
		batches := sampler.Batches(o.batch, false)
		start := time.Now()
		loss := optim.Metric{Name: "loss"}
		var stepTime time.Duration // in Step: waiting for the reductions, then the update
		for b, idx := range batches {
			opt.SetLR(sched.LR(float64(epoch) + float64(b+1)/float64(len(batches))))
			for i, s := range idx {
				copy(x[i*mnist.Pixels:(i+1)*mnist.Pixels], train.Image(s))
				y[i] = train.Labels[s]
			}
			n := len(idx)
			if err := opt.ZeroGrad(); err != nil {
				return res, err
			}
			model.Forward(x, n)
			l, _ := model.Loss(y[:n])
			if err := model.Backward(opt.Ready); err != nil {
				return res, err
			}
			t0 := time.Now()
			if err := opt.Step(); err != nil {
				return res, err
			}
			stepTime += time.Since(t0)
			loss.Add(l, float64(n))
		}
		elapsed := time.Since(start)
		correct, count := evaluate(model, test, rank, size)
		acc := optim.Metric{Name: "accuracy"}
		acc.Add(float64(correct)/float64(count), float64(count))
		// Means over every rank's samples.
		v, err := optim.AverageMetrics(ctx, coll, &loss, &acc)
		if err != nil {
			return res, err
		}
		res = result{loss: v[0], accuracy: v[1]}
		if rank == 0 {
			fmt.Fprintf(out, "epoch %d: loss %.4f  test accuracy %.2f%%  %.1fs (%.0f%% in Step)  %.0f samples/s  lr %.4g\n",
				epoch+1, res.loss, 100*res.accuracy, elapsed.Seconds(), 100*stepTime.Seconds()/elapsed.Seconds(),
				float64(size)*loss.Weight/elapsed.Seconds(), opt.LR())
		}
	}
	res.checksum = checksum(model)
	return res, nil
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
	if train, test, err = mnist.Load(dir); err != nil {
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

// newOptimizer returns SGD over the model's parameters wrapped in a
// DistributedOptimizer on coll: gradients are averaged across ranks as
// backward produces them.
func newOptimizer(o options, model *mlp.MLP, coll optim.Collectives) (*optim.DistributedOptimizer, error) {
	sgd, err := optim.NewSGD(model.Params(), optim.SGDConfig{LR: o.lr, Momentum: o.momentum, WeightDecay: o.wd})
	if err != nil {
		return nil, err
	}
	comp, _ := o.compression()
	dopts := []optim.DistOption{optim.WithCompression(comp), optim.BucketBytes(o.bucket)}
	if o.groups > 0 {
		dopts = append(dopts, optim.NumGroups(o.groups))
	}
	return optim.NewDistributed(sgd, coll, dopts...)
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
// rank) and returns how many it got right, of how many.
func evaluate(m *mlp.MLP, set *mnist.Set, rank, size int) (correct, count int) {
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
		for i, p := range m.Predict(x, hi-lo) {
			if p == int(set.Labels[idx[lo+i]]) {
				correct++
			}
		}
	}
	return correct, len(idx)
}
