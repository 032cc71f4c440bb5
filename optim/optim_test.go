package optim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gohorovod/gohorovod/tensor"
)

// p0 and g are the starting values and the (constant) gradients of the
// closed-form tests.
var (
	p0 = []float64{0.3, -0.7, 2, 0}
	g0 = []float64{1, -2, 0.5, 0.25}
)

// newParams returns one parameter "w" of dtype dt holding vals, with grad.
func newParams(dt tensor.DType, vals, grad []float64) []Param {
	switch dt {
	case tensor.Float32:
		v, g := make([]float32, len(vals)), make([]float32, len(grad))
		for i := range vals {
			v[i], g[i] = float32(vals[i]), float32(grad[i])
		}
		return []Param{{Name: "w", Value: tensor.FromFloat32(v), Grad: tensor.FromFloat32(g)}}
	default:
		return []Param{{Name: "w", Value: tensor.FromFloat64(append([]float64(nil), vals...)), Grad: tensor.FromFloat64(append([]float64(nil), grad...))}}
	}
}

func values(t *tensor.Tensor) []float64 {
	switch t.DType() {
	case tensor.Float32:
		out := []float64{}
		for _, x := range t.Float32s() {
			out = append(out, float64(x))
		}
		return out
	default:
		return append([]float64(nil), t.Float64s()...)
	}
}

func sign(x float64) float64 {
	if x < 0 {
		return -1
	}
	return 1
}

// TestClosedForms runs each optimizer for a few steps on a constant gradient
// and compares with the closed form of its parameter trajectory.
func TestClosedForms(t *testing.T) {
	const lr = 0.1
	cases := []struct {
		name string
		grad []float64 // nil: g0
		make func([]Param) (Optimizer, error)
		want func(step int, p, g float64) float64 // value after step steps
	}{
		{"sgd", nil,
			func(ps []Param) (Optimizer, error) { return NewSGD(ps, SGDConfig{LR: lr}) },
			func(t int, p, g float64) float64 { return p - float64(t)*lr*g }},
		{"sgd/momentum", nil,
			func(ps []Param) (Optimizer, error) { return NewSGD(ps, SGDConfig{LR: lr, Momentum: 0.9}) },
			func(t int, p, g float64) float64 {
				// b_k = g·(1-μ^k)/(1-μ)
				for k := 1; k <= t; k++ {
					p -= lr * g * (1 - math.Pow(0.9, float64(k))) / (1 - 0.9)
				}
				return p
			}},
		{"sgd/dampening", nil,
			func(ps []Param) (Optimizer, error) {
				return NewSGD(ps, SGDConfig{LR: lr, Momentum: 0.5, Dampening: 0.5})
			},
			func(t int, p, g float64) float64 {
				// b_1 = g, b_k = 0.5·b + 0.5·g = g: the buffer stays at g.
				return p - float64(t)*lr*g
			}},
		{"sgd/nesterov", nil,
			func(ps []Param) (Optimizer, error) {
				return NewSGD(ps, SGDConfig{LR: lr, Momentum: 0.9, Nesterov: true})
			},
			func(t int, p, g float64) float64 {
				for k := 1; k <= t; k++ {
					p -= lr * (g + 0.9*g*(1-math.Pow(0.9, float64(k)))/(1-0.9))
				}
				return p
			}},
		{"sgd/weight-decay", []float64{0, 0, 0, 0},
			func(ps []Param) (Optimizer, error) { return NewSGD(ps, SGDConfig{LR: lr, WeightDecay: 0.5}) },
			func(t int, p, _ float64) float64 { return p * math.Pow(1-lr*0.5, float64(t)) }},
		{"adam", nil,
			func(ps []Param) (Optimizer, error) { return NewAdam(ps, AdamConfig{LR: lr, Eps: 0.25}) },
			// Bias-corrected moments of a constant gradient are g and g².
			func(t int, p, g float64) float64 { return p - float64(t)*lr*g/(math.Abs(g)+0.25) }},
		{"adamw/decay-only", []float64{0, 0, 0, 0},
			func(ps []Param) (Optimizer, error) { return NewAdamW(ps, AdamConfig{LR: lr, WeightDecay: 0.5}) },
			func(t int, p, _ float64) float64 { return p * math.Pow(1-lr*0.5, float64(t)) }},
		{"adamw", nil,
			func(ps []Param) (Optimizer, error) {
				return NewAdamW(ps, AdamConfig{LR: lr, WeightDecay: 0.5, Beta1: 0.8, Beta2: 0.9})
			},
			func(t int, p, g float64) float64 {
				for k := 1; k <= t; k++ {
					p = p*(1-lr*0.5) - lr*g/(math.Abs(g)+1e-8)
				}
				return p
			}},
		{"rmsprop", nil,
			func(ps []Param) (Optimizer, error) { return NewRMSProp(ps, RMSPropConfig{LR: lr, Alpha: 0.9}) },
			func(t int, p, g float64) float64 {
				for k := 1; k <= t; k++ {
					p -= lr * g / (math.Abs(g)*math.Sqrt(1-math.Pow(0.9, float64(k))) + 1e-8)
				}
				return p
			}},
		{"rmsprop/centered+momentum", nil,
			func(ps []Param) (Optimizer, error) {
				return NewRMSProp(ps, RMSPropConfig{LR: lr, Alpha: 0.9, Momentum: 0.5, Centered: true, Eps: 0.1})
			},
			func(t int, p, g float64) float64 {
				// a_k = g(1-α^k), v_k = g²(1-α^k): variance g²(1-α^k)α^k.
				b := 0.0
				for k := 1; k <= t; k++ {
					ak := math.Pow(0.9, float64(k))
					b = 0.5*b + g/(math.Abs(g)*math.Sqrt((1-ak)*ak)+0.1)
					p -= lr * b
				}
				return p
			}},
		{"adagrad", nil,
			func(ps []Param) (Optimizer, error) {
				return NewAdagrad(ps, AdagradConfig{LR: lr, LRDecay: 0.5, InitialSum: 0.1})
			},
			func(t int, p, g float64) float64 {
				for k := 1; k <= t; k++ {
					p -= lr / (1 + float64(k-1)*0.5) * g / (math.Sqrt(0.1+float64(k)*g*g) + 1e-10)
				}
				return p
			}},
	}
	for _, c := range cases {
		for _, dt := range []tensor.DType{tensor.Float64, tensor.Float32} {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				grad := g0
				if c.grad != nil {
					grad = c.grad
				}
				ps := newParams(dt, p0, grad)
				opt, err := c.make(ps)
				if err != nil {
					t.Fatal(err)
				}
				tol := 1e-12
				if dt == tensor.Float32 {
					tol = 1e-5
				}
				for step := 1; step <= 4; step++ {
					if err := opt.Step(); err != nil {
						t.Fatal(err)
					}
					got := values(ps[0].Value)
					for j := range got {
						want := c.want(step, p0[j], grad[j])
						if math.Abs(got[j]-want) > tol*math.Max(1, math.Abs(want)) {
							t.Fatalf("step %d, element %d: got %.10g, want %.10g", step, j, got[j], want)
						}
					}
				}
				if got := opt.State().Scalars["step"]; got != 4 {
					t.Errorf("step count %g, want 4", got)
				}
			})
		}
	}
}

// TestAdamTwoSteps checks Adam by hand on two different gradients, where
// the bias corrections no longer cancel.
func TestAdamTwoSteps(t *testing.T) {
	ps := newParams(tensor.Float64, []float64{1}, []float64{1})
	opt, err := NewAdam(ps, AdamConfig{LR: 0.01, WeightDecay: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	opt.Step() // g = 1 + 0.1·1; m̂ = g, v̂ = g²: p = 1 - 0.01·g/(g+1e-8)
	p1 := 1 - 0.01*1.1/(1.1+1e-8)
	if got := ps[0].Value.Float64s()[0]; math.Abs(got-p1) > 1e-15 {
		t.Fatalf("step 1: %.17g, want %.17g", got, p1)
	}
	ps[0].Grad.Float64s()[0] = -3
	opt.Step()
	g1, g2 := 1.1, -3+0.1*p1
	m := 0.9*0.1*g1 + 0.1*g2
	v := 0.999*0.001*g1*g1 + 0.001*g2*g2
	p2 := p1 - 0.01*(m/(1-0.81))/(math.Sqrt(v/(1-0.999*0.999))+1e-8)
	if got := ps[0].Value.Float64s()[0]; math.Abs(got-p2) > 1e-15 {
		t.Fatalf("step 2: %.17g, want %.17g", got, p2)
	}
}

// full builds each optimizer with every buffer it can have, over two
// parameters of different dtypes.
var full = []struct {
	name string
	make func([]Param) (Optimizer, error)
}{
	{"sgd", func(ps []Param) (Optimizer, error) {
		return NewSGD(ps, SGDConfig{LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-3})
	}},
	{"adam", func(ps []Param) (Optimizer, error) { return NewAdam(ps, AdamConfig{LR: 0.01, WeightDecay: 1e-3}) }},
	{"adamw", func(ps []Param) (Optimizer, error) { return NewAdamW(ps, AdamConfig{LR: 0.01, WeightDecay: 1e-2}) }},
	{"rmsprop", func(ps []Param) (Optimizer, error) {
		return NewRMSProp(ps, RMSPropConfig{LR: 0.01, Momentum: 0.9, Centered: true, WeightDecay: 1e-3})
	}},
	{"adagrad", func(ps []Param) (Optimizer, error) {
		return NewAdagrad(ps, AdagradConfig{LR: 0.1, LRDecay: 0.01, InitialSum: 0.1})
	}},
}

func twoParams() []Param {
	return []Param{
		{Name: "a", Value: tensor.FromFloat32([]float32{0.5, -1, 2}), Grad: tensor.New(tensor.Float32, 3)},
		{Name: "b", Value: tensor.FromFloat64([]float64{1, 2, 3, 4}, 2, 2), Grad: tensor.New(tensor.Float64, 2, 2)},
	}
}

// runSteps sets pseudo-random gradients (from seed) and steps n times.
func runSteps(t *testing.T, opt Optimizer, seed uint64, n int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	for range n {
		for _, p := range opt.Params() {
			switch p.Grad.DType() {
			case tensor.Float32:
				for j := range p.Grad.Float32s() {
					p.Grad.Float32s()[j] = float32(r.NormFloat64())
				}
			case tensor.Float64:
				for j := range p.Grad.Float64s() {
					p.Grad.Float64s()[j] = r.NormFloat64()
				}
			}
		}
		if err := opt.Step(); err != nil {
			t.Fatal(err)
		}
	}
}

func snapshot(ps []Param) [][]byte {
	out := make([][]byte, len(ps))
	for i, p := range ps {
		out[i] = append([]byte(nil), p.Value.Bytes()...)
	}
	return out
}

func restore(ps []Param, snap [][]byte) {
	for i, p := range ps {
		copy(p.Value.Bytes(), snap[i])
	}
}

func equalSnap(a, b [][]byte) bool {
	for i := range a {
		if string(a[i]) != string(b[i]) {
			return false
		}
	}
	return true
}

// TestStateRoundTrip saves an optimizer's state after some steps and checks
// that a fresh optimizer given that state continues bit for bit as the
// original does, while one without it does not.
func TestStateRoundTrip(t *testing.T) {
	for _, c := range full {
		t.Run(c.name, func(t *testing.T) {
			ps := twoParams()
			a, err := c.make(ps)
			if err != nil {
				t.Fatal(err)
			}
			runSteps(t, a, 1, 3)
			saved, vals := a.State(), snapshot(ps)
			if saved.Kind != c.name {
				t.Errorf("kind %q, want %q", saved.Kind, c.name)
			}
			runSteps(t, a, 2, 4)
			want := snapshot(ps)

			// State is a copy: scribbling on it changes nothing.
			scribble := a.State()
			for _, tt := range scribble.Tensors {
				clear(tt.Bytes())
			}
			scribble.Scalars["lr"] = 123
			if a.LR() == 123 {
				t.Fatal("State shares scalars with the optimizer")
			}

			ps2 := twoParams()
			b, err := c.make(ps2)
			if err != nil {
				t.Fatal(err)
			}
			b.SetLR(99) // overwritten by SetState
			if err := b.SetState(saved); err != nil {
				t.Fatal(err)
			}
			if b.LR() != saved.Scalars["lr"] {
				t.Errorf("lr %g after SetState, want %g", b.LR(), saved.Scalars["lr"])
			}
			restore(ps2, vals)
			runSteps(t, b, 2, 4)
			if !equalSnap(snapshot(ps2), want) {
				t.Fatal("continuation after SetState differs from the original run")
			}

			// Without the state the continuation differs: the test above
			// can fail.
			ps3 := twoParams()
			fresh, _ := c.make(ps3)
			restore(ps3, vals)
			runSteps(t, fresh, 2, 4)
			if equalSnap(snapshot(ps3), want) {
				t.Fatal("continuation without state matches: state carries nothing")
			}
		})
	}
}

func TestSetStateErrors(t *testing.T) {
	ps := twoParams()
	opt, err := NewAdam(ps, AdamConfig{LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	sgd, _ := NewSGD(twoParams(), SGDConfig{LR: 0.1, Momentum: 0.9})
	plain, _ := NewSGD(twoParams(), SGDConfig{LR: 0.1})
	cases := []struct {
		name  string
		opt   Optimizer
		state func() *State
	}{
		{"nil", opt, func() *State { return nil }},
		{"kind", opt, func() *State { return sgd.State() }},
		{"missing tensor", opt, func() *State { s := opt.State(); delete(s.Tensors, SlotKey("a", "exp_avg")); return s }},
		{"renamed tensor", opt, func() *State {
			s := opt.State()
			s.Tensors["zz/exp_avg"] = s.Tensors[SlotKey("a", "exp_avg")]
			delete(s.Tensors, SlotKey("a", "exp_avg"))
			return s
		}},
		{"shape", opt, func() *State {
			s := opt.State()
			s.Tensors[SlotKey("a", "exp_avg")] = tensor.New(tensor.Float32, 4)
			return s
		}},
		{"dtype", opt, func() *State {
			s := opt.State()
			s.Tensors[SlotKey("a", "exp_avg")] = tensor.New(tensor.Float64, 3)
			return s
		}},
		{"missing scalar", opt, func() *State { s := opt.State(); delete(s.Scalars, "beta2"); return s }},
		{"momentum into plain sgd", plain, func() *State { return sgd.State() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := c.opt.State()
			err := c.opt.SetState(c.state())
			if !errors.Is(err, ErrState) {
				t.Fatalf("err = %v, want ErrState", err)
			}
			after := c.opt.State()
			for k, v := range before.Scalars {
				if after.Scalars[k] != v {
					t.Errorf("failed SetState changed scalar %q", k)
				}
			}
		})
	}
}

func TestCheckParams(t *testing.T) {
	f := func() *tensor.Tensor { return tensor.New(tensor.Float32, 2) }
	cases := []struct {
		name   string
		params []Param
	}{
		{"empty", nil},
		{"no name", []Param{{Value: f(), Grad: f()}}},
		{"duplicate", []Param{{Name: "x", Value: f(), Grad: f()}, {Name: "x", Value: f(), Grad: f()}}},
		{"nil grad", []Param{{Name: "x", Value: f()}}},
		{"int", []Param{{Name: "x", Value: tensor.New(tensor.Int32, 2), Grad: tensor.New(tensor.Int32, 2)}}},
		{"grad shape", []Param{{Name: "x", Value: f(), Grad: tensor.New(tensor.Float32, 3)}}},
		{"grad dtype", []Param{{Name: "x", Value: f(), Grad: tensor.New(tensor.Float64, 2)}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := NewSGD(c.params, SGDConfig{LR: 0.1}); !errors.Is(err, ErrParams) {
				t.Fatalf("err = %v, want ErrParams", err)
			}
		})
	}
	if _, err := NewSGD([]Param{{Name: "x", Value: f(), Grad: f()}}, SGDConfig{LR: -1}); err == nil {
		t.Error("negative learning rate accepted")
	}
	if _, err := NewSGD([]Param{{Name: "x", Value: f(), Grad: f()}}, SGDConfig{LR: 1, Nesterov: true}); err == nil {
		t.Error("Nesterov without momentum accepted")
	}
}

func TestZeroGrad(t *testing.T) {
	ps := twoParams()
	opt, _ := NewSGD(ps, SGDConfig{LR: 0.1})
	ps[0].Grad.Float32s()[1] = 3
	ps[1].Grad.Float64s()[2] = 4
	if err := opt.ZeroGrad(); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		for _, b := range p.Grad.Bytes() {
			if b != 0 {
				t.Fatalf("gradient of %s not zeroed", p.Name)
			}
		}
	}
}

func ExampleNewSGD() {
	w := []float64{1, 2}
	grad := []float64{0.5, -1}
	opt, err := NewSGD([]Param{{Name: "w", Value: tensor.FromFloat64(w), Grad: tensor.FromFloat64(grad)}},
		SGDConfig{LR: 0.1, Momentum: 0.9})
	if err != nil {
		panic(err)
	}
	opt.Step()
	opt.Step()
	fmt.Printf("%.3f\n", w)
	// Output: [0.855 2.290]
}
