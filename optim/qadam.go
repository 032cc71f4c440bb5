package optim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/gohorovod/gohorovod/tensor"
)

// QAdamConfig holds QAdam's hyper-parameters: Adam's (weight decay as an
// L2 penalty) and the number of warm-up steps.
type QAdamConfig struct {
	AdamConfig
	// Warmup is the number of steps of plain Adam on allreduced gradients
	// before the second moment is frozen; it must be at least 1 (the
	// second moment would otherwise stay zero).
	Warmup int
}

// ErrQAdamHook is returned by QAdam's Step after warm-up when the step's
// gradients did not come through QAdam's Hook (they must be the averaged
// momentum then).
var ErrQAdamHook = errors.New("optim: QAdam: after warm-up, the gradients must be communicated by QAdam's Hook (WithCommHook(q.Hook()))")

// QAdam is Bagua's QAdam (Tang et al., 1-bit Adam's schedule with 8-bit
// communication): for the first Warmup steps it is Adam on the allreduced
// gradients, exactly; then the second moment v is frozen, each rank
// computes its momentum m = β1·m + (1−β1)·(grad + wd·p) from its own
// gradient, the momenta are averaged by ByteGrad's 8-bit exchange, and the
// parameters take Adam's step with the averaged momentum and the frozen v:
//
//	p = p − lr·(m/(1−β1^t)) / (sqrt(v/(1−β2^t)) + eps)
//
// Wrap it in a DistributedOptimizer with its Hook, which does the
// communication of both phases:
//
//	q, err := optim.NewQAdam(params, optim.QAdamConfig{AdamConfig: optim.AdamConfig{LR: 1e-3}, Warmup: 100})
//	opt, err := optim.NewDistributed(q, coll, optim.WithCommHook(q.Hook()))
//
// Its State is Adam's, of kind "qadam", with the scalar "warmup".
type QAdam struct {
	core
	adam *Adam // the same core, for the warm-up steps

	mu        sync.Mutex
	exchanged bool // the Hook finished a bucket of a post-warm-up step
}

// NewQAdam returns a QAdam optimizer over params. A Warmup below 1 is an
// error, on every rank alike, before anything is communicated.
func NewQAdam(params []Param, cfg QAdamConfig) (*QAdam, error) {
	if cfg.Warmup < 1 {
		return nil, fmt.Errorf("optim: QAdam: warmup = %d steps; it must be at least 1, to estimate the second moment that QAdam freezes", cfg.Warmup)
	}
	a, err := newAdam("qadam", params, cfg.AdamConfig)
	if err != nil {
		return nil, err
	}
	a.scalars["warmup"] = float64(cfg.Warmup)
	return &QAdam{core: a.core, adam: a}, nil
}

// warm reports whether the next step is a warm-up step.
func (q *QAdam) warm() bool { return q.scalars["step"] < q.scalars["warmup"] }

// Step applies one update: Adam's during warm-up, after it Adam's with
// the gradients as the averaged momentum and the second moment frozen.
func (q *QAdam) Step() error {
	if q.warm() {
		return q.adam.Step()
	}
	q.mu.Lock()
	ok := q.exchanged
	q.exchanged = false
	q.mu.Unlock()
	if !ok {
		return ErrQAdamHook
	}
	q.scalars["step"]++
	for i, p := range q.params {
		if p.Value.DType() == tensor.Float64 {
			qadamStep[float64](&q.core, i)
		} else {
			qadamStep[float32](&q.core, i)
		}
	}
	return nil
}

// qadamStep takes parameter i's gradient as its momentum and steps with
// the frozen second moment.
func qadamStep[T float](c *core, i int) {
	h := c.scalars
	t := h["step"]
	step := T(h["lr"] / (1 - math.Pow(h["beta1"], t)))
	sq2 := T(math.Sqrt(1 - math.Pow(h["beta2"], t)))
	eps := T(h["eps"])
	v, g, bufs := views[T](c, i, "exp_avg", "exp_avg_sq")
	m, s := bufs[0], bufs[1]
	copy(m, g)
	for j := range v {
		v[j] -= step * m[j] / (T(math.Sqrt(float64(s[j])))/sq2 + eps)
	}
}

// Hook returns the communication hook that QAdam needs: during warm-up it
// allreduces the gradients (averaged); after, it replaces each bucket's
// gradients by the momenta computed from them and averages those through
// the 8-bit exchange (which needs Alltoall and Allgather, as ByteGrad).
func (q *QAdam) Hook() CommHook { return &qadamHook{q: q, bufs: map[int][]float32{}} }

type qadamHook struct {
	q    *QAdam
	mu   sync.Mutex
	bufs map[int][]float32 // per bucket, the momenta travelling
}

// checkOp refuses reductions other than Average at NewDistributed.
func (h *qadamHook) checkOp(op tensor.ReduceOp, _ float64) error {
	if op != Average {
		return fmt.Errorf("optim: DistributedOptimizer: QAdam averages momenta: it needs op Average, not %v", op)
	}
	return nil
}

// Start allreduces b's gradients in warm-up; after, it computes the
// momenta into the bucket's vector and exchanges them.
func (h *qadamHook) Start(c Collectives, b *Bucket) (Waiter, error) {
	if h.q.warm() {
		return allreduceAll(c, b.Grads, b.Name, b.Op, b.Prescale, b.Postscale)
	}
	if _, _, _, err := exchangeOf(c); err != nil {
		return nil, err
	}
	n := 0
	for _, g := range b.Grads {
		n += g.Len()
	}
	h.mu.Lock()
	buf := h.bufs[b.Index]
	if len(buf) != n {
		buf = make([]float32, n)
		h.bufs[b.Index] = buf
	}
	h.mu.Unlock()
	off := 0
	for k, g := range b.Grads {
		if err := h.momentum(b.Params[k], g, buf[off:off+g.Len()]); err != nil {
			return nil, err
		}
		off += g.Len()
	}
	scale := b.Prescale * b.Postscale / float64(c.Size())
	return Async(func() error {
		return byteGradExchange(context.Background(), c, b.Name+".qadam", buf, scale, nil)
	}), nil
}

// momentum writes β1·m + (1−β1)·(g + wd·p) of parameter p into dst,
// leaving the optimizer's m as it is.
func (h *qadamHook) momentum(p Param, g *tensor.Tensor, dst []float32) error {
	i, ok := h.q.index(p.Name)
	if !ok {
		return fmt.Errorf("optim: QAdam's Hook: parameter %q is not QAdam's", p.Name)
	}
	s := h.q.scalars
	b1, wd := s["beta1"], s["weight_decay"]
	m := h.q.buf[i]["exp_avg"]
	if g.DType() == tensor.Float64 {
		for j, gj := range g.Float64s() {
			dst[j] = float32(b1*m.Float64s()[j] + (1-b1)*(gj+wd*p.Value.Float64s()[j]))
		}
		return nil
	}
	b1f, wdf := float32(b1), float32(wd)
	mv, pv := m.Float32s(), p.Value.Float32s()
	for j, gj := range g.Float32s() {
		dst[j] = b1f*mv[j] + (1-b1f)*(gj+wdf*pv[j])
	}
	return nil
}

// Finish writes the averaged momenta into b's gradients after warm-up.
func (h *qadamHook) Finish(b *Bucket) error {
	if h.q.warm() {
		return nil
	}
	h.mu.Lock()
	buf := h.bufs[b.Index]
	h.mu.Unlock()
	off := 0
	for _, g := range b.Grads {
		copyFromFloat32(g, buf[off:off+g.Len()])
		off += g.Len()
	}
	h.q.mu.Lock()
	h.q.exchanged = true
	h.q.mu.Unlock()
	return nil
}

// index returns the position of the parameter named name.
func (c *core) index(name string) (int, bool) {
	for i, p := range c.params {
		if p.Name == name {
			return i, true
		}
	}
	return 0, false
}
