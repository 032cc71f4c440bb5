package mlp

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/optim/nn"
)

func batch(n, in, classes int, seed uint64) ([]float32, []uint8) {
	r := rand.New(rand.NewPCG(seed, 9))
	x := make([]float32, n*in)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y := make([]uint8, n)
	for i := range y {
		y[i] = uint8(r.IntN(classes))
	}
	return x, y
}

var _ Norm = (*nn.BatchNorm[float32])(nil)

// batchNorms returns local nn.BatchNorm layers bn1, bn2, ... for the
// hidden layers of sizes.
func batchNorms(t testing.TB, sizes []int) []Norm {
	var norms []Norm
	for l, w := range sizes[1 : len(sizes)-1] {
		bn, err := nn.NewBatchNorm[float32](fmt.Sprint("bn", l+1), w)
		if err != nil {
			t.Fatal(err)
		}
		norms = append(norms, bn)
	}
	return norms
}

// TestGradientMatchesFiniteDifferences checks Backward against central
// differences of Loss for a sample of entries of every parameter, without
// and with batch normalisation after the hidden layers.
func TestGradientMatchesFiniteDifferences(t *testing.T) {
	sizes := []int{6, 5, 4, 3}
	t.Run("plain", func(t *testing.T) { checkGradient(t, New(sizes, 1)) })
	t.Run("batchnorm", func(t *testing.T) {
		m := New(sizes, 1, WithNorms(batchNorms(t, sizes)...))
		// Weights and biases away from 1 and 0, so that their
		// gradients matter.
		for _, p := range m.Params() {
			if v := p.Value.Float32s(); p.Name == "bn1.weight" || p.Name == "bn2.bias" {
				for i := range v {
					v[i] += 0.3 * float32(i+1)
				}
			}
		}
		checkGradient(t, m)
	})
}

func checkGradient(t *testing.T, m *MLP) {
	x, y := batch(7, 6, 3, 2)
	mustForward(t, m, x, 7)
	m.Loss(y)
	if err := m.Backward(nil); err != nil {
		t.Fatal(err)
	}
	lossAt := func() float64 {
		mustForward(t, m, x, 7)
		l, _ := m.Loss(y)
		return l
	}
	for _, p := range m.Params() {
		v, g := p.Value.Float32s(), p.Grad.Float32s()
		for _, j := range []int{0, len(v) / 2, len(v) - 1} {
			const h = 1e-2
			old := v[j]
			v[j] = old + h
			up := lossAt()
			v[j] = old - h
			down := lossAt()
			v[j] = old
			num := (up - down) / (2 * h)
			if math.Abs(num-float64(g[j])) > 2e-3+2e-2*math.Abs(num) {
				t.Errorf("%s[%d]: backward %g, finite difference %g", p.Name, j, g[j], num)
			}
		}
	}
}

// TestReadyOrderAndFinality checks that Backward reports every parameter
// once, last layer first, and that a reported gradient no longer changes.
func TestReadyOrderAndFinality(t *testing.T) {
	m := New([]int{8, 6, 5, 4}, 3)
	x, y := batch(5, 8, 4, 4)
	mustForward(t, m, x, 5)
	m.Loss(y)
	var order []string
	snaps := map[string][]float32{}
	err := m.Backward(func(p optim.Param) error {
		order = append(order, p.Name)
		snaps[p.Name] = slices.Clone(p.Grad.Float32s())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"fc3.bias", "fc3.weight", "fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight"}
	if !slices.Equal(order, want) {
		t.Fatalf("ready order %v, want %v", order, want)
	}
	for _, p := range m.Params() {
		if !slices.Equal(snaps[p.Name], p.Grad.Float32s()) {
			t.Errorf("%s changed after it was reported ready", p.Name)
		}
	}
}

// TestNorms: the norms' parameters join the model's in forward order and
// are reported ready in reverse order (the DistributedOptimizer's
// default backward order) once final; Predict runs them in evaluation
// mode (one row works, where training needs two) and restores training
// mode; a mismatched norm panics.
func TestNorms(t *testing.T) {
	sizes := []int{8, 6, 5, 4}
	norms := batchNorms(t, sizes)
	m := New(sizes, 3, WithNorms(norms...))
	var names []string
	for _, p := range m.Params() {
		names = append(names, p.Name)
	}
	forward := []string{"fc1.weight", "fc1.bias", "bn1.weight", "bn1.bias", "fc2.weight", "fc2.bias", "bn2.weight", "bn2.bias", "fc3.weight", "fc3.bias"}
	if !slices.Equal(names, forward) {
		t.Fatalf("params %v, want %v", names, forward)
	}
	x, y := batch(5, 8, 4, 4)
	mustForward(t, m, x, 5)
	m.Loss(y)
	var order []string
	snaps := map[string][]float32{}
	if err := m.Backward(func(p optim.Param) error {
		order = append(order, p.Name)
		snaps[p.Name] = slices.Clone(p.Grad.Float32s())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Reverse(forward)
	if !slices.Equal(order, forward) {
		t.Fatalf("ready order %v, want %v", order, forward)
	}
	for _, p := range m.Params() {
		if !slices.Equal(snaps[p.Name], p.Grad.Float32s()) {
			t.Errorf("%s changed after it was reported ready", p.Name)
		}
	}
	if _, err := m.Forward(x[:8], 1); !errors.Is(err, nn.ErrInput) {
		t.Fatalf("training Forward of one row: %v", err)
	}
	running := slices.Clone(norms[0].(*nn.BatchNorm[float32]).RunningMean())
	if p, err := m.Predict(x[:8], 1); err != nil || len(p) != 1 {
		t.Fatalf("Predict of one row: %v, %v", p, err)
	}
	if !slices.Equal(running, norms[0].(*nn.BatchNorm[float32]).RunningMean()) {
		t.Fatal("Predict changed the running mean")
	}
	for i, nm := range norms {
		if !nm.(*nn.BatchNorm[float32]).Training() {
			t.Fatalf("norm %d left in evaluation mode by Predict", i)
		}
	}
	for _, bad := range [][]Norm{norms[:1], {norms[1], norms[0]}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New with %d misfitting norms did not panic", len(bad))
				}
			}()
			New(sizes, 3, WithNorms(bad...))
		}()
	}
}

// TestGradientsAccumulate checks that two backward passes add up.
func TestGradientsAccumulate(t *testing.T) {
	m := New([]int{4, 3, 2}, 5)
	x, y := batch(3, 4, 2, 6)
	mustForward(t, m, x, 3)
	m.Loss(y)
	m.Backward(nil)
	once := slices.Clone(m.Params()[0].Grad.Float32s())
	mustForward(t, m, x, 3)
	m.Loss(y)
	m.Backward(nil)
	for i, g := range m.Params()[0].Grad.Float32s() {
		if math.Abs(float64(g-2*once[i])) > 1e-6 {
			t.Fatalf("element %d: %g after two passes, %g after one", i, g, once[i])
		}
	}
}

// TestLearnsSeparableData trains a few steps of SGD on a fixed batch and
// checks that the loss falls and the batch ends up classified.
func TestLearnsSeparableData(t *testing.T) {
	m := New([]int{10, 16, 3}, 7)
	x, y := batch(30, 10, 3, 8)
	opt, err := optim.NewSGD(m.Params(), optim.SGDConfig{LR: 0.1, Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	mustForward(t, m, x, 30)
	first, _ := m.Loss(y)
	var last float64
	var correct int
	for range 200 {
		opt.ZeroGrad()
		mustForward(t, m, x, 30)
		last, correct = m.Loss(y)
		m.Backward(nil)
		opt.Step()
	}
	if last > first/10 || correct != 30 {
		t.Fatalf("loss %g -> %g, %d/30 correct", first, last, correct)
	}
}

func BenchmarkTrainStep(b *testing.B) {
	for _, n := range []int{32, 128} {
		b.Run(fmt.Sprintf("batch%d", n), func(b *testing.B) {
			m := New([]int{784, 256, 128, 10}, 1)
			x, y := batch(n, 784, 10, 2)
			b.ReportAllocs()
			b.SetBytes(int64(n * 784 * 4))
			for b.Loop() {
				mustForward(b, m, x, n)
				m.Loss(y)
				m.Backward(nil)
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

func mustForward(tb testing.TB, m *MLP, x []float32, n int) []float32 {
	tb.Helper()
	z, err := m.Forward(x, n)
	if err != nil {
		tb.Fatal(err)
	}
	return z
}

// TestParseWidths: a comma-separated list of positive widths, spaces
// allowed; anything else is refused, naming the bad entry.
func TestParseWidths(t *testing.T) {
	if ws, err := ParseWidths("256, 128"); err != nil || len(ws) != 2 || ws[0] != 256 || ws[1] != 128 {
		t.Fatalf("ParseWidths(\"256, 128\") = %v, %v", ws, err)
	}
	for _, bad := range []string{"", "8,x", "0", "8,,4", "-1"} {
		if ws, err := ParseWidths(bad); err == nil {
			t.Errorf("ParseWidths(%q) = %v, want an error", bad, ws)
		}
	}
}
