package optim

import (
	"math"

	"github.com/gohorovod/gohorovod/tensor"
)

// RMSPropConfig holds the hyper-parameters of RMSProp. Zero Alpha and Eps
// mean the defaults 0.99 and 1e-8.
type RMSPropConfig struct {
	LR          float64 // learning rate
	Alpha       float64 // smoothing constant of the squared-gradient average
	Eps         float64 // added to the denominator
	Momentum    float64 // momentum factor; 0 disables the momentum buffer
	Centered    bool    // normalise by the estimated variance instead of the second moment
	WeightDecay float64 // L2 penalty added to the gradient
}

// RMSProp is Hinton's RMSProp with PyTorch's update rule:
//
//	g = grad + wd·p
//	v = α·v + (1-α)·g²
//	a = α·a + (1-α)·g; d = sqrt(v - a²) + eps  (centered)
//	d = sqrt(v) + eps                          (otherwise)
//	b = μ·b + g/d; p = p - lr·b                (momentum)
//	p = p - lr·g/d                             (otherwise)
type RMSProp struct {
	core
	centered, momentum bool
}

// NewRMSProp returns an RMSProp optimizer over params.
func NewRMSProp(params []Param, cfg RMSPropConfig) (*RMSProp, error) {
	slots := []string{"square_avg"}
	if cfg.Momentum != 0 {
		slots = append(slots, "momentum")
	}
	if cfg.Centered {
		slots = append(slots, "grad_avg")
	}
	centered := 0.0
	if cfg.Centered {
		centered = 1
	}
	c, err := newCore("rmsprop", params, slots, map[string]float64{
		"lr": cfg.LR, "alpha": orDefault(cfg.Alpha, 0.99), "eps": orDefault(cfg.Eps, 1e-8),
		"momentum": cfg.Momentum, "centered": centered, "weight_decay": cfg.WeightDecay,
	})
	if err != nil {
		return nil, err
	}
	return &RMSProp{core: c, centered: cfg.Centered, momentum: cfg.Momentum != 0}, nil
}

// SetState replaces the state (see Optimizer); the buffers present
// (momentum, centered) must match.
func (o *RMSProp) SetState(s *State) error {
	if s != nil && s.Scalars != nil && ((s.Scalars["centered"] != 0) != o.centered || (s.Scalars["momentum"] != 0) != o.momentum) {
		return wrapState("rmsprop: momentum/centered settings differ")
	}
	return o.core.SetState(s)
}

// Step applies one RMSProp update. Float32 parameters run the fused kernel
// tensor.RMSPropUpdateF32 with the work of all parameters spread over the
// cores.
func (o *RMSProp) Step() error {
	h := o.scalars
	lr, alpha, eps, mu, wd := float32(h["lr"]), float32(h["alpha"]), float32(h["eps"]), float32(h["momentum"]), float32(h["weight_decay"])
	o.stepF32(o.slots, func(p *f32Param, lo, hi int) {
		var mom, avg []float32
		k := 1
		if o.momentum {
			mom = part(p.bufs[k], lo, hi)
			k++
		}
		if o.centered {
			avg = part(p.bufs[k], lo, hi)
		}
		tensor.RMSPropUpdateF32(p.v[lo:hi], p.g[lo:hi], p.bufs[0][lo:hi], mom, avg, lr, alpha, eps, mu, wd)
	})
	for i, p := range o.params {
		if p.Value.DType() == tensor.Float64 {
			rmspropStep[float64](o, i)
		}
	}
	o.scalars["step"]++
	return nil
}

func rmspropStep[T float](o *RMSProp, i int) {
	h := o.scalars
	lr, alpha, eps, mu, wd := T(h["lr"]), T(h["alpha"]), T(h["eps"]), T(h["momentum"]), T(h["weight_decay"])
	v, g, bufs := views[T](&o.core, i, o.slots...)
	sq := bufs[0]
	var mom, avg []T
	k := 1
	if o.momentum {
		mom = bufs[k]
		k++
	}
	if o.centered {
		avg = bufs[k]
	}
	for j := range v {
		gj := g[j] + wd*v[j]
		sq[j] = alpha*sq[j] + (1-alpha)*gj*gj
		var d T
		if o.centered {
			avg[j] = alpha*avg[j] + (1-alpha)*gj
			d = T(math.Sqrt(float64(sq[j]-avg[j]*avg[j]))) + eps
		} else {
			d = T(math.Sqrt(float64(sq[j]))) + eps
		}
		if o.momentum {
			mom[j] = mu*mom[j] + gj/d
			v[j] -= lr * mom[j]
		} else {
			v[j] -= lr * gj / d
		}
	}
}
