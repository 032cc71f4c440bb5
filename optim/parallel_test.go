package optim

import (
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"testing"

	"github.com/gohorovod/gohorovod/tensor"
)

func TestForRangesCoversEachElementOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(5))
	for _, lens := range [][]int{
		nil, {0}, {1}, {7, 0, 9}, {minChunk}, {minChunk + 1},
		{3, 5*minChunk + 17, 0, 2, minChunk / 3, 4 * minChunk},
		{minChunk / 2, minChunk / 2, minChunk / 2, minChunk / 2, minChunk/2 + 1},
	} {
		t.Run(fmt.Sprint(len(lens), lens), func(t *testing.T) {
			seen := make([][]int32, len(lens))
			for i, n := range lens {
				seen[i] = make([]int32, n)
			}
			forRanges(lens, func(i, lo, hi int) {
				for j := lo; j < hi; j++ {
					seen[i][j]++ // ranges are disjoint: no race
				}
			})
			for i := range seen {
				for j, c := range seen[i] {
					if c != 1 {
						t.Fatalf("param %d element %d visited %d times", i, j, c)
					}
				}
			}
		})
	}
}

// TestStepMatchesScalarLoops runs each optimizer's Step (fused kernels,
// parallel over the cores) beside the scalar per-parameter loops on the
// same float32 parameters, for a few steps, and compares them.
func TestStepMatchesScalarLoops(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	sizes := []int{3, 70001, 5, 3*minChunk + 9, 1, 64}
	params := func(seed int64) []Param {
		r := rand.New(rand.NewSource(seed))
		ps := make([]Param, len(sizes))
		for i, n := range sizes {
			v, g := make([]float32, n), make([]float32, n)
			for j := range v {
				v[j], g[j] = float32(r.NormFloat64()), float32(r.NormFloat64())
			}
			ps[i] = Param{Name: fmt.Sprint("p", i), Value: tensor.FromFloat32(v), Grad: tensor.FromFloat32(g)}
		}
		return ps
	}
	type pair struct {
		fused, scalar Optimizer
		scalarStep    func()
	}
	cases := []struct {
		name string
		make func() pair
	}{
		{"sgd", func() pair {
			a, _ := NewSGD(params(1), SGDConfig{LR: 0.1, WeightDecay: 1e-4})
			b, _ := NewSGD(params(1), SGDConfig{LR: 0.1, WeightDecay: 1e-4})
			return pair{a, b, func() { scalarSGD(b) }}
		}},
		{"sgd momentum dampening", func() pair {
			cfg := SGDConfig{LR: 0.1, Momentum: 0.9, Dampening: 0.1, WeightDecay: 1e-4}
			a, _ := NewSGD(params(2), cfg)
			b, _ := NewSGD(params(2), cfg)
			return pair{a, b, func() { scalarSGD(b) }}
		}},
		{"sgd nesterov", func() pair {
			cfg := SGDConfig{LR: 0.1, Momentum: 0.9, Nesterov: true, WeightDecay: 5e-4}
			a, _ := NewSGD(params(3), cfg)
			b, _ := NewSGD(params(3), cfg)
			return pair{a, b, func() { scalarSGD(b) }}
		}},
		{"adam", func() pair {
			cfg := AdamConfig{LR: 1e-3, WeightDecay: 1e-2}
			a, _ := NewAdam(params(4), cfg)
			b, _ := NewAdam(params(4), cfg)
			return pair{a, b, func() { scalarAdam(b, false) }}
		}},
		{"adamw", func() pair {
			cfg := AdamConfig{LR: 1e-3, WeightDecay: 1e-2}
			a, _ := NewAdamW(params(5), cfg)
			b, _ := NewAdamW(params(5), cfg)
			return pair{a, b, func() { scalarAdam(b, true) }}
		}},
		{"rmsprop centered momentum", func() pair {
			cfg := RMSPropConfig{LR: 1e-2, Momentum: 0.9, Centered: true, WeightDecay: 1e-4}
			a, _ := NewRMSProp(params(6), cfg)
			b, _ := NewRMSProp(params(6), cfg)
			return pair{a, b, func() { scalarRMSProp(b) }}
		}},
		{"rmsprop", func() pair {
			cfg := RMSPropConfig{LR: 1e-2}
			a, _ := NewRMSProp(params(7), cfg)
			b, _ := NewRMSProp(params(7), cfg)
			return pair{a, b, func() { scalarRMSProp(b) }}
		}},
		{"adagrad", func() pair {
			cfg := AdagradConfig{LR: 1e-2, LRDecay: 0.1, WeightDecay: 1e-4, InitialSum: 0.1}
			a, _ := NewAdagrad(params(8), cfg)
			b, _ := NewAdagrad(params(8), cfg)
			return pair{a, b, func() { scalarAdagrad(b) }}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.make()
			for step := 0; step < 3; step++ {
				if err := p.fused.Step(); err != nil {
					t.Fatal(err)
				}
				p.scalarStep()
			}
			got, want := p.fused.State(), p.scalar.State()
			if got.Scalars["step"] != want.Scalars["step"] {
				t.Fatalf("step %v, want %v", got.Scalars["step"], want.Scalars["step"])
			}
			for i, gp := range p.fused.Params() {
				closeF32(t, gp.Name, tensor.View[float32](gp.Value), tensor.View[float32](p.scalar.Params()[i].Value))
			}
			for k, w := range want.Tensors {
				closeF32(t, k, tensor.View[float32](got.Tensors[k]), tensor.View[float32](w))
			}
		})
	}
}

func closeF32(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for j := range got {
		if d := math.Abs(float64(got[j] - want[j])); d > 1e-6*math.Abs(float64(want[j])) {
			t.Fatalf("%s[%d] = %g, want %g", what, j, got[j], want[j])
		}
	}
}

// The scalar references: the per-parameter loops Step ran before the fused
// kernels, on float32.

func scalarSGD(o *SGD) {
	first := o.scalars["step"] == 0
	for i := range o.params {
		sgdStep[float32](&o.core, i, o.scalars, first, o.nesterov)
	}
	o.scalars["step"]++
}

func scalarAdam(o *Adam, decoupled bool) {
	o.scalars["step"]++
	for i := range o.params {
		adamStep[float32](&o.core, i, decoupled)
	}
}

func scalarRMSProp(o *RMSProp) {
	for i := range o.params {
		rmspropStep[float32](o, i)
	}
	o.scalars["step"]++
}

func scalarAdagrad(o *Adagrad) {
	o.scalars["step"]++
	for i := range o.params {
		adagradStep[float32](&o.core, i)
	}
}
