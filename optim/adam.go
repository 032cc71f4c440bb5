package optim

import (
	"math"

	"github.com/gohorovod/gohorovod/tensor"
)

// AdamConfig holds the hyper-parameters of Adam and AdamW. Zero Beta1, Beta2
// and Eps mean the defaults 0.9, 0.999 and 1e-8.
type AdamConfig struct {
	LR          float64 // learning rate
	Beta1       float64 // decay of the first-moment estimate
	Beta2       float64 // decay of the second-moment estimate
	Eps         float64 // added to the denominator
	WeightDecay float64 // L2 penalty (Adam) or decoupled decay (AdamW)
}

// Adam is the Adam optimizer of Kingma and Ba (NewAdam), or AdamW, Adam with
// decoupled weight decay of Loshchilov and Hutter (NewAdamW), with PyTorch's
// update rule. At step t (from 1):
//
//	p = p·(1 - lr·wd)                  (AdamW only)
//	g = grad + wd·p                    (Adam only)
//	m = β1·m + (1-β1)·g
//	v = β2·v + (1-β2)·g²
//	p = p - lr·(m/(1-β1^t)) / (sqrt(v/(1-β2^t)) + eps)
type Adam struct {
	core
}

// NewAdam returns an Adam optimizer over params (weight decay as an L2
// penalty added to the gradient).
func NewAdam(params []Param, cfg AdamConfig) (*Adam, error) { return newAdam("adam", params, cfg) }

// NewAdamW returns an AdamW optimizer over params (weight decay decoupled
// from the gradient).
func NewAdamW(params []Param, cfg AdamConfig) (*Adam, error) { return newAdam("adamw", params, cfg) }

func newAdam(kind string, params []Param, cfg AdamConfig) (*Adam, error) {
	c, err := newCore(kind, params, []string{"exp_avg", "exp_avg_sq"}, map[string]float64{
		"lr": cfg.LR, "beta1": orDefault(cfg.Beta1, 0.9), "beta2": orDefault(cfg.Beta2, 0.999),
		"eps": orDefault(cfg.Eps, 1e-8), "weight_decay": cfg.WeightDecay,
	})
	if err != nil {
		return nil, err
	}
	return &Adam{core: c}, nil
}

func orDefault(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}

// Step applies one Adam (or AdamW) update. Float32 parameters run the fused
// kernel tensor.AdamUpdateF32 with the work of all parameters spread over
// the cores.
func (o *Adam) Step() error {
	o.scalars["step"]++
	decoupled := o.kind == "adamw"
	h := o.scalars
	b1, b2, t := h["beta1"], h["beta2"], h["step"]
	step := float32(h["lr"] / (1 - math.Pow(b1, t)))
	sq2 := float32(math.Sqrt(1 - math.Pow(b2, t)))
	lr, wd, eps := float32(h["lr"]), float32(h["weight_decay"]), float32(h["eps"])
	o.stepF32(o.slots, func(p *f32Param, lo, hi int) {
		tensor.AdamUpdateF32(p.v[lo:hi], p.g[lo:hi], p.bufs[0][lo:hi], p.bufs[1][lo:hi],
			lr, float32(b1), float32(b2), eps, wd, step, sq2, decoupled)
	})
	for i, p := range o.params {
		if p.Value.DType() == tensor.Float64 {
			adamStep[float64](&o.core, i, decoupled)
		}
	}
	return nil
}

func adamStep[T float](c *core, i int, decoupled bool) {
	h := c.scalars
	b1, b2, t := h["beta1"], h["beta2"], h["step"]
	bc1 := 1 - math.Pow(b1, t)
	bc2 := 1 - math.Pow(b2, t)
	lr, wd, eps := T(h["lr"]), T(h["weight_decay"]), T(h["eps"])
	step := T(h["lr"] / bc1)
	sq2 := T(math.Sqrt(bc2))
	tb1, tb2 := T(b1), T(b2)
	v, g, bufs := views[T](c, i, "exp_avg", "exp_avg_sq")
	m, s := bufs[0], bufs[1]
	for j := range v {
		gj := g[j]
		if decoupled {
			v[j] *= 1 - lr*wd
		} else {
			gj += wd * v[j]
		}
		m[j] = tb1*m[j] + (1-tb1)*gj
		s[j] = tb2*s[j] + (1-tb2)*gj*gj
		v[j] -= step * m[j] / (T(math.Sqrt(float64(s[j])))/sq2 + eps)
	}
}
