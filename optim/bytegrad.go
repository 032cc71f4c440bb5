package optim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/gohorovod/gohorovod/tensor"
)

// ByteGradConfig configures ByteGrad.
type ByteGradConfig struct {
	// ErrorFeedback keeps, per gradient element, what the 8-bit
	// quantizations lost, and adds it back at the next step (Bagua's
	// ByteGrad has none): this rank's gradient's error to its next
	// gradient before quantizing, and, for the chunk this rank owns, the
	// error of the re-quantized mean to the next mean (as DoubleSqueeze
	// does). The sum of the exchanged gradients over steps then stays
	// within one quantization step of the sum of the true means. The
	// residuals are the hook's state (slots "bytegrad.residual" and
	// "bytegrad.owner").
	ErrorFeedback bool
}

// ByteGrad is Bagua's ByteGrad as a communication hook: each bucket's
// gradients, as one vector of float32, are cut into Size chunks (chunk r
// of rank r, ShardRange's split); each chunk is quantized to 8 bits with
// its own min and max (QuantizeMinMaxUint8) and sent to its owner with an
// alltoall; the owner averages the chunks it received, quantizes the
// mean again and every rank gathers every owner's chunk with an
// allgather. Every rank ends with the same gradients, which approximate
// the mean within the quantization steps; a rank sends about a quarter
// of the bytes of an fp32 allreduce (2(n−1)/n·N bytes for N values, plus
// 8 bytes per chunk), counted in the runtime's Stats.SentBytes.
//
// It needs a Collectives with Alltoall, Allgather and Rank (FromRuntime's
// and FromProcessSet's) and float32 or float64 gradients (float64 ones
// travel through float32), and averages: op Average or Sum, with the
// optimizer's prescale and postscale. A NaN or infinite gradient fails the
// step on every rank with ErrNotFinite naming the rank where it was.
// Use one ByteGrad per DistributedOptimizer.
type ByteGrad struct {
	cfg ByteGradConfig

	mu      sync.Mutex
	buckets map[int]*byteGradBucket
	// residual holds, per slot (byteGradSlots), per parameter, float32
	// in the parameter's shape.
	residual [2]map[string]*tensor.Tensor
}

// byteGradSlots are the state slots of the local and the owner
// residuals.
var byteGradSlots = [2]string{"bytegrad.residual", "bytegrad.owner"}

// byteGradBucket is one bucket's buffers: the flat gradient and the error
// feedback of the step in flight.
type byteGradBucket struct {
	buf []float32
	fb  *byteGradFeedback
}

var _ StatefulHook = (*ByteGrad)(nil)

// NewByteGrad returns a ByteGrad hook; pass it to WithCommHook.
func NewByteGrad(cfg ByteGradConfig) *ByteGrad {
	return &ByteGrad{cfg: cfg, buckets: map[int]*byteGradBucket{}, residual: [2]map[string]*tensor.Tensor{{}, {}}}
}

// checkOp refuses reductions other than Average and Sum at
// NewDistributed.
func (h *ByteGrad) checkOp(op tensor.ReduceOp, _ float64) error {
	if op != Average && op != Sum {
		return fmt.Errorf("optim: DistributedOptimizer: ByteGrad sums quantized chunks: it needs op Average or Sum, not %v", op)
	}
	return nil
}

// bucket returns b's buffers, made on first use.
func (h *ByteGrad) bucket(b *Bucket) (*byteGradBucket, error) {
	n := 0
	for _, g := range b.Grads {
		if dt := g.DType(); dt != tensor.Float32 && dt != tensor.Float64 {
			return nil, fmt.Errorf("optim: ByteGrad: gradient %s is %v, not float32 or float64", b.Name, dt)
		}
		n += g.Len()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	bb := h.buckets[b.Index]
	if bb == nil || len(bb.buf) != n {
		bb = &byteGradBucket{buf: make([]float32, n)}
		if h.cfg.ErrorFeedback {
			bb.fb = &byteGradFeedback{local: make([]float32, n), ownerIn: make([]float32, n), ownerOut: make([]float32, n)}
		}
		h.buckets[b.Index] = bb
	}
	return bb, nil
}

// Start copies b's gradients (plus the residual, with error feedback)
// into the bucket's vector and runs the exchange in a goroutine.
func (h *ByteGrad) Start(c Collectives, b *Bucket) (Waiter, error) {
	if _, _, _, err := exchangeOf(c); err != nil {
		return nil, err
	}
	bb, err := h.bucket(b)
	if err != nil {
		return nil, err
	}
	off := 0
	for k, g := range b.Grads {
		dst := bb.buf[off : off+g.Len()]
		copyToFloat32(dst, g)
		if bb.fb != nil {
			own := bb.fb.ownerIn[off : off+g.Len()]
			clear(own)
			if r := h.residualOf(0, b.Params[k]); r != nil {
				for i, v := range r.Float32s() {
					dst[i] += v
				}
			}
			if r := h.residualOf(1, b.Params[k]); r != nil {
				copy(own, r.Float32s())
			}
		}
		off += g.Len()
	}
	scale := b.Prescale * b.Postscale
	if b.Op == Average {
		scale /= float64(c.Size())
	}
	return Async(func() error {
		return byteGradExchange(context.Background(), c, b.Name+".bytegrad", bb.buf, scale, bb.fb)
	}), nil
}

// residualOf returns p's residual of slot k, or nil before its first
// step.
func (h *ByteGrad) residualOf(k int, p Param) *tensor.Tensor {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.residual[k][p.Name]
	if r == nil || !r.Shape().Equal(p.Value.Shape()) {
		return nil
	}
	return r
}

// Finish writes the exchanged vector into b's gradients and, with error
// feedback, keeps the step's residuals.
func (h *ByteGrad) Finish(b *Bucket) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	bb := h.buckets[b.Index]
	off := 0
	for k, g := range b.Grads {
		copyFromFloat32(g, bb.buf[off:off+g.Len()])
		if bb.fb != nil {
			p := b.Params[k]
			for slot, src := range [2][]float32{bb.fb.local, bb.fb.ownerOut} {
				r := tensor.New(tensor.Float32, p.Value.Shape()...)
				copy(r.Float32s(), src[off:off+g.Len()])
				h.residual[slot][p.Name] = r
			}
		}
		off += g.Len()
	}
	return nil
}

// copyToFloat32 copies g (float32 or float64) into dst.
func copyToFloat32(dst []float32, g *tensor.Tensor) {
	if g.DType() == tensor.Float32 {
		copy(dst, g.Float32s())
		return
	}
	for i, v := range g.Float64s() {
		dst[i] = float32(v)
	}
}

// copyFromFloat32 copies src into g (float32 or float64).
func copyFromFloat32(g *tensor.Tensor, src []float32) {
	if g.DType() == tensor.Float32 {
		copy(g.Float32s(), src)
		return
	}
	d := g.Float64s()
	for i, v := range src {
		d[i] = float64(v)
	}
}

// StatePrefix returns "bytegrad.".
func (h *ByteGrad) StatePrefix() string { return "bytegrad." }

// HookState returns the residuals: SlotKey(param, "bytegrad.residual")
// and SlotKey(param, "bytegrad.owner"); none without error feedback.
func (h *ByteGrad) HookState() *State {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &State{Kind: "bytegrad", Scalars: map[string]float64{}, Tensors: map[string]*tensor.Tensor{}}
	for k, slot := range byteGradSlots {
		for name, r := range h.residual[k] {
			s.Tensors[SlotKey(name, slot)] = r.Clone()
		}
	}
	return s
}

// SetHookState replaces the residuals by copies of s's. A residual whose
// shape is not its parameter's is ignored (the gradient starts without
// one).
func (h *ByteGrad) SetHookState(s *State) error {
	res := [2]map[string]*tensor.Tensor{{}, {}}
	for k := range s.Scalars {
		return fmt.Errorf("%w: ByteGrad has no scalar %q", ErrState, k)
	}
	for k, t := range s.Tensors {
		i := strings.LastIndexByte(k, '/')
		slot := -1
		if i >= 0 {
			slot = slices.Index(byteGradSlots[:], k[i+1:])
		}
		if slot < 0 {
			return fmt.Errorf("%w: ByteGrad has no state %q (want param/bytegrad.residual or param/bytegrad.owner)", ErrState, k)
		}
		if t.Device().Kind != tensor.CPU || t.DType() != tensor.Float32 {
			return fmt.Errorf("%w: ByteGrad residual %q is %v, not float32 on the host", ErrState, k, t)
		}
		res[slot][k[:i]] = t.Clone()
	}
	h.mu.Lock()
	h.residual = res
	h.mu.Unlock()
	return nil
}
