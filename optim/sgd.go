package optim

import (
	"fmt"

	"github.com/gohorovod/gohorovod/tensor"
)

// SGDConfig holds the hyper-parameters of SGD. The zero value (but for LR)
// is plain gradient descent.
type SGDConfig struct {
	LR          float64 // learning rate
	Momentum    float64 // momentum factor; 0 disables the momentum buffer
	Dampening   float64 // dampening of the gradient in the momentum buffer
	Nesterov    bool    // Nesterov momentum (needs Momentum > 0, Dampening 0)
	WeightDecay float64 // L2 penalty added to the gradient
}

// SGD is stochastic gradient descent with optional momentum, Nesterov
// momentum and weight decay, with the update rule of PyTorch's torch.optim.SGD:
//
//	g = grad + wd·p
//	b = g                      (first step)
//	b = μ·b + (1-dampening)·g  (later steps)
//	g = g + μ·b (Nesterov) or g = b
//	p = p - lr·g
type SGD struct {
	core
	nesterov bool
}

// NewSGD returns an SGD optimizer over params.
func NewSGD(params []Param, cfg SGDConfig) (*SGD, error) {
	if cfg.Nesterov && (cfg.Momentum <= 0 || cfg.Dampening != 0) {
		return nil, fmt.Errorf("optim: sgd: Nesterov momentum needs Momentum > 0 and Dampening 0")
	}
	var slots []string
	if cfg.Momentum != 0 {
		slots = []string{"momentum"}
	}
	nesterov := 0.0
	if cfg.Nesterov {
		nesterov = 1
	}
	c, err := newCore("sgd", params, slots, map[string]float64{
		"lr": cfg.LR, "momentum": cfg.Momentum, "dampening": cfg.Dampening,
		"nesterov": nesterov, "weight_decay": cfg.WeightDecay,
	})
	if err != nil {
		return nil, err
	}
	return &SGD{core: c, nesterov: cfg.Nesterov}, nil
}

// SetState replaces the state (see Optimizer); the Nesterov flag and the
// presence of a momentum buffer must match.
func (o *SGD) SetState(s *State) error {
	if s != nil && s.Scalars != nil && ((s.Scalars["nesterov"] != 0) != o.nesterov || (s.Scalars["momentum"] != 0) != (len(o.slots) > 0)) {
		return wrapState("sgd: momentum/Nesterov settings differ")
	}
	return o.core.SetState(s)
}

// Step applies one SGD update. Float32 parameters run the fused kernel
// tensor.SGDUpdateF32 with the work of all parameters spread over the cores.
func (o *SGD) Step() error {
	h := o.scalars
	first := h["step"] == 0
	lr, mu, damp, wd := float32(h["lr"]), float32(h["momentum"]), float32(h["dampening"]), float32(h["weight_decay"])
	o.stepF32(o.slots, func(p *f32Param, lo, hi int) {
		var b []float32
		if len(p.bufs) > 0 {
			b = p.bufs[0][lo:hi]
		}
		tensor.SGDUpdateF32(p.v[lo:hi], p.g[lo:hi], b, lr, mu, damp, wd, o.nesterov, first)
	})
	for i, p := range o.params {
		if p.Value.DType() == tensor.Float64 {
			sgdStep[float64](&o.core, i, h, first, o.nesterov)
		}
	}
	h["step"]++
	return nil
}

func sgdStep[T float](c *core, i int, h map[string]float64, first, nesterov bool) {
	lr, mu, damp, wd := T(h["lr"]), T(h["momentum"]), T(h["dampening"]), T(h["weight_decay"])
	if mu == 0 {
		v, g, _ := views[T](c, i)
		for j := range v {
			v[j] -= lr * (g[j] + wd*v[j])
		}
		return
	}
	v, g, bufs := views[T](c, i, "momentum")
	b := bufs[0]
	for j := range v {
		gj := g[j] + wd*v[j]
		if first {
			b[j] = gj
		} else {
			b[j] = mu*b[j] + (1-damp)*gj
		}
		if nesterov {
			gj += mu * b[j]
		} else {
			gj = b[j]
		}
		v[j] -= lr * gj
	}
}
