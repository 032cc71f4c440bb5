package optim

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/internal/cputime"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// resnet50Shapes reads the element counts of ResNet-50's 161 parameter
// tensors (25,557,032 float32 elements) from the synthetic example's table.
func resnet50Shapes(b *testing.B) []int {
	f, err := os.Open("../examples/synthetic/shapes/resnet50_shapes.txt")
	if err != nil {
		b.Skip(err)
	}
	defer f.Close()
	var sizes []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		n := 1
		for _, d := range strings.Split(fields[len(fields)-1], "x") {
			k, err := strconv.Atoi(d)
			if err != nil {
				b.Fatalf("bad shape line %q", line)
			}
			n *= k
		}
		sizes = append(sizes, n)
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return sizes
}

func benchParams(sizes []int) []Param {
	ps := make([]Param, len(sizes))
	for i, n := range sizes {
		v, g := make([]float32, n), make([]float32, n)
		for j := range v {
			v[j], g[j] = 1e-3*float32(j%97), 1e-4*float32(j%89)
		}
		ps[i] = Param{Name: strconv.Itoa(i), Value: tensor.FromFloat32(v), Grad: tensor.FromFloat32(g)}
	}
	return ps
}

// BenchmarkUpdate measures one optimizer step over ResNet-50's parameters
// (161 float32 tensors, 25.5M elements) beside a plain copy of the same
// parameters, split over the cores the same way, in the same run. Metrics:
// Gelem/s (parameters updated per second) and GB/s (bytes read plus bytes
// written: copy 8 per element, SGD 12, SGD with momentum 20, Adam 28,
// RMSProp and Adagrad 20). The "scalar" case is SGD with momentum through
// the per-parameter loops Step ran before the fused kernels, on one core.
//
//	go test -run '^$' -bench Update -count 5 ./optim/
func BenchmarkUpdate(b *testing.B) {
	sizes := resnet50Shapes(b)
	total := 0
	for _, n := range sizes {
		total += n
	}
	report := func(b *testing.B, bytesPerElem int) {
		sec := b.Elapsed().Seconds()
		elems := float64(total) * float64(b.N)
		b.ReportMetric(elems/sec/1e9, "Gelem/s")
		b.ReportMetric(elems*float64(bytesPerElem)/sec/1e9, "GB/s")
	}
	b.Run("copy", func(b *testing.B) {
		src, dst := benchParams(sizes), benchParams(sizes)
		sv, dv := make([][]float32, len(sizes)), make([][]float32, len(sizes))
		for i := range sizes {
			sv[i], dv[i] = tensor.View[float32](src[i].Value), tensor.View[float32](dst[i].Value)
		}
		b.ResetTimer()
		for b.Loop() {
			forRanges(sizes, func(i, lo, hi int) { copy(dv[i][lo:hi], sv[i][lo:hi]) })
		}
		report(b, 8)
	})
	opts := []struct {
		name  string
		bytes int
		make  func([]Param) (Optimizer, error)
	}{
		{"sgd", 12, func(p []Param) (Optimizer, error) { return NewSGD(p, SGDConfig{LR: 0.1, WeightDecay: 1e-4}) }},
		{"sgd-momentum", 20, func(p []Param) (Optimizer, error) {
			return NewSGD(p, SGDConfig{LR: 0.1, Momentum: 0.9, WeightDecay: 1e-4})
		}},
		{"sgd-nesterov", 20, func(p []Param) (Optimizer, error) {
			return NewSGD(p, SGDConfig{LR: 0.1, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-4})
		}},
		{"adam", 28, func(p []Param) (Optimizer, error) { return NewAdam(p, AdamConfig{LR: 1e-3}) }},
		{"adamw", 28, func(p []Param) (Optimizer, error) { return NewAdamW(p, AdamConfig{LR: 1e-3, WeightDecay: 1e-2}) }},
		{"rmsprop", 20, func(p []Param) (Optimizer, error) { return NewRMSProp(p, RMSPropConfig{LR: 1e-2}) }},
		{"adagrad", 20, func(p []Param) (Optimizer, error) { return NewAdagrad(p, AdagradConfig{LR: 1e-2}) }},
	}
	for _, o := range opts {
		b.Run(o.name, func(b *testing.B) {
			opt, err := o.make(benchParams(sizes))
			if err != nil {
				b.Fatal(err)
			}
			if err := opt.Step(); err != nil { // past the first step
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if err := opt.Step(); err != nil {
					b.Fatal(err)
				}
			}
			report(b, o.bytes)
		})
	}
	b.Run("sgd-momentum-scalar", func(b *testing.B) {
		opt, err := NewSGD(benchParams(sizes), SGDConfig{LR: 0.1, Momentum: 0.9, WeightDecay: 1e-4})
		if err != nil {
			b.Fatal(err)
		}
		scalarSGD(opt)
		b.ResetTimer()
		for b.Loop() {
			scalarSGD(opt)
		}
		report(b, 20)
	})
}

// BenchmarkDistributedStep measures one training step through the
// DistributedOptimizer over two in-process runtimes (the in-memory
// transport), as hvdbench's optimizer case does under mpirun: ZeroGrad,
// each gradient copied in from a precomputed buffer and reported Ready in
// backward order, then Step (SGD with momentum). The gradient layouts:
// "own", the default over gradients that are each the model's own
// allocation (the runtime copies the small ones through its fusion
// buffer); "ownflat", the default over gradients the model allocated as
// views of one buffer in forward order (tensor.NewFlat; reduced in place);
// "moved", FlatGradients(true) over separate allocations (moved into the
// optimizer's flat buffer; reduced in place). Models: ResNet-50's 161
// gradients, and 1000 gradients of 4 KiB, where fusion matters most.
// Beside the wall time per step it reports the process's CPU time per
// step (both ranks, the runtimes' loops included), which a loaded
// machine disturbs less.
//
//	go test -run '^$' -bench DistributedStep -count 5 ./optim/
func BenchmarkDistributedStep(b *testing.B) {
	models := []struct {
		name  string
		sizes func(*testing.B) []int
	}{
		{"resnet50", resnet50Shapes},
		{"4KiBx1000", func(*testing.B) []int {
			s := make([]int, 1000)
			for i := range s {
				s[i] = 1024
			}
			return s
		}},
	}
	layouts := []struct {
		name string
		flat bool // the model allocates its gradients as views of one buffer
		opts []DistOption
	}{
		{"own", false, nil},
		{"ownflat", true, nil},
		{"moved", false, []DistOption{FlatGradients(true)}},
	}
	for _, m := range models {
		for _, l := range layouts {
			b.Run(m.name+"/"+l.name, func(b *testing.B) {
				benchDistributedStep(b, m.sizes(b), l.flat, l.opts)
			})
		}
	}
}

func benchDistributedStep(b *testing.B, sizes []int, flat bool, opts []DistOption) {
	const n = 2
	cfg := config.Default()
	cfg.CycleTime = time.Millisecond
	rts, err := hvd.StartLocal(n, hvd.WithConfig(cfg), hvd.WithLogger(zerolog.Nop()))
	if err != nil {
		b.Fatal(err)
	}
	defer hvd.StopLocal(rts)
	opt := make([]*DistributedOptimizer, n)
	src := make([][]float32, len(sizes))
	for i, cnt := range sizes {
		src[i] = make([]float32, cnt)
		for j := range src[i] {
			src[i][j] = float32((i*7 + j) % 13)
		}
	}
	shapes := make([]tensor.Shape, len(sizes))
	for i, cnt := range sizes {
		shapes[i] = tensor.Shape{cnt}
	}
	for r := range n {
		ps := benchParams(sizes)
		if flat {
			_, grads := tensor.NewFlat(tensor.Float32, shapes...)
			for i := range ps {
				ps[i].Grad = grads[i]
			}
		}
		sgd, err := NewSGD(ps, SGDConfig{LR: 1e-6, Momentum: 0.9})
		if err != nil {
			b.Fatal(err)
		}
		coll, err := FromRuntime(rts[r])
		if err != nil {
			b.Fatal(err)
		}
		if opt[r], err = NewDistributed(sgd, coll, opts...); err != nil {
			b.Fatal(err)
		}
		defer opt[r].Close()
	}
	step := func(d *DistributedOptimizer) error {
		if err := d.ZeroGrad(); err != nil {
			return err
		}
		ps := d.Params()
		for i := len(ps) - 1; i >= 0; i-- {
			copy(ps[i].Grad.Float32s(), src[i])
			if err := d.Ready(ps[i]); err != nil {
				return err
			}
		}
		return d.Step()
	}
	steps := func(k int) {
		errs := make(chan error, n)
		for r := range n {
			go func() {
				for range k {
					if err := step(opt[r]); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
	}
	steps(3) // negotiate and fill the cache
	b.ResetTimer()
	cpu0, known := cputime.Seconds()
	steps(b.N)
	cpu1, _ := cputime.Seconds()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/step")
	if known {
		b.ReportMetric((cpu1-cpu0)*1e3/float64(b.N), "cpu-ms/step")
	}
}
