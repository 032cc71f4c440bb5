package mlp

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gohorovod/gohorovod/optim"
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

// TestGradientMatchesFiniteDifferences checks Backward against central
// differences of Loss for a sample of entries of every parameter.
func TestGradientMatchesFiniteDifferences(t *testing.T) {
	m := New([]int{6, 5, 4, 3}, 1)
	x, y := batch(7, 6, 3, 2)
	m.Forward(x, 7)
	m.Loss(y)
	if err := m.Backward(nil); err != nil {
		t.Fatal(err)
	}
	lossAt := func() float64 {
		m.Forward(x, 7)
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
	m.Forward(x, 5)
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

// TestGradientsAccumulate checks that two backward passes add up.
func TestGradientsAccumulate(t *testing.T) {
	m := New([]int{4, 3, 2}, 5)
	x, y := batch(3, 4, 2, 6)
	m.Forward(x, 3)
	m.Loss(y)
	m.Backward(nil)
	once := slices.Clone(m.Params()[0].Grad.Float32s())
	m.Forward(x, 3)
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
	m.Forward(x, 30)
	first, _ := m.Loss(y)
	var last float64
	var correct int
	for range 200 {
		opt.ZeroGrad()
		m.Forward(x, 30)
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
				m.Forward(x, n)
				m.Loss(y)
				m.Backward(nil)
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}
