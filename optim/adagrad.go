package optim

import (
	"fmt"
	"math"

	"github.com/gohorovod/gohorovod/tensor"
)

// AdagradConfig holds the hyper-parameters of Adagrad. Zero Eps means the
// default 1e-10.
type AdagradConfig struct {
	LR          float64 // learning rate
	LRDecay     float64 // learning-rate decay per step
	WeightDecay float64 // L2 penalty added to the gradient
	InitialSum  float64 // starting value of the squared-gradient sum
	Eps         float64 // added to the denominator
}

// Adagrad is the Adagrad optimizer of Duchi et al., with PyTorch's update
// rule. At step t (from 1):
//
//	g = grad + wd·p
//	s = s + g²
//	p = p - lr/(1+(t-1)·lr_decay) · g/(sqrt(s) + eps)
type Adagrad struct {
	core
}

// NewAdagrad returns an Adagrad optimizer over params.
func NewAdagrad(params []Param, cfg AdagradConfig) (*Adagrad, error) {
	c, err := newCore("adagrad", params, []string{"sum"}, map[string]float64{
		"lr": cfg.LR, "lr_decay": cfg.LRDecay, "weight_decay": cfg.WeightDecay,
		"initial_accumulator_value": cfg.InitialSum, "eps": orDefault(cfg.Eps, 1e-10),
	})
	if err != nil {
		return nil, err
	}
	for i, p := range c.params {
		switch p.Value.DType() {
		case tensor.Float32:
			fill(tensor.View[float32](c.buf[i]["sum"]), float32(cfg.InitialSum))
		case tensor.Float64:
			fill(tensor.View[float64](c.buf[i]["sum"]), cfg.InitialSum)
		}
	}
	return &Adagrad{core: c}, nil
}

func fill[T float](s []T, v T) {
	for i := range s {
		s[i] = v
	}
}

// Step applies one Adagrad update. Float32 parameters run the fused kernel
// tensor.AdagradUpdateF32 with the work of all parameters spread over the
// cores.
func (o *Adagrad) Step() error {
	o.scalars["step"]++
	h := o.scalars
	clr := float32(h["lr"] / (1 + (h["step"]-1)*h["lr_decay"]))
	wd, eps := float32(h["weight_decay"]), float32(h["eps"])
	o.stepF32(o.slots, func(p *f32Param, lo, hi int) {
		tensor.AdagradUpdateF32(p.v[lo:hi], p.g[lo:hi], p.bufs[0][lo:hi], clr, eps, wd)
	})
	for i, p := range o.params {
		if p.Value.DType() == tensor.Float64 {
			adagradStep[float64](&o.core, i)
		}
	}
	return nil
}

func adagradStep[T float](c *core, i int) {
	h := c.scalars
	clr := T(h["lr"] / (1 + (h["step"]-1)*h["lr_decay"]))
	wd, eps := T(h["weight_decay"]), T(h["eps"])
	v, g, bufs := views[T](c, i, "sum")
	s := bufs[0]
	for j := range v {
		gj := g[j] + wd*v[j]
		s[j] += gj * gj
		v[j] -= clr * gj / (T(math.Sqrt(float64(s[j]))) + eps)
	}
}

func wrapState(msg string) error { return fmt.Errorf("%w: %s", ErrState, msg) }
