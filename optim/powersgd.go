package optim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"

	"github.com/gohorovod/gohorovod/tensor"
)

// PowerSGDConfig configures PowerSGD. The zero value is rank-1 PowerSGD
// from the first step with error feedback and warm start. The fields are
// those of PyTorch's PowerSGDState, with the booleans turned so that their
// zero value is torch's default.
type PowerSGDConfig struct {
	// MatrixApproximationRank is r, the rank of the approximation of
	// each compressed gradient (torch's matrix_approximation_rank);
	// 0 means 1. A matrix of rows×cols is approximated at rank
	// min(r, rows, cols).
	MatrixApproximationRank int
	// StartPowerSGDIter is the number of steps that allreduce the
	// gradients uncompressed, without error feedback, before PowerSGD
	// starts (torch's start_powerSGD_iter, whose default is 1,000;
	// here 0). Training is usually more accurate with a warm-up.
	StartPowerSGDIter int
	// MinCompressionRate: a gradient of rows×cols (a higher-rank one is
	// rows = its first dimension, cols = the product of the rest) is
	// compressed when rows·cols > it·(rows+cols)·rank (torch's
	// _should_compress: a compression rate above it), else it is
	// allreduced as it is, batched with the bucket's other such gradients
	// (vectors, small matrices). 0 means torch's default, 2; a small
	// positive value (say 1e-9) compresses every matrix.
	MinCompressionRate float64
	// NoErrorFeedback turns off error feedback (torch's
	// use_error_feedback=False): the part of each compressed gradient
	// that its approximation lost is then dropped instead of being added
	// to the next step's.
	NoErrorFeedback bool
	// NoWarmStart turns off warm start (torch's warm_start=False): Q
	// starts from fresh random values every step instead of from the
	// last step's.
	NoWarmStart bool
	// OrthogonalizationEpsilon is added to each column's norm in the
	// Gram-Schmidt orthogonalisation of P (torch's
	// orthogonalization_epsilon, default 0: a zero column stays zero).
	OrthogonalizationEpsilon float64
	// Seed seeds the random initial Q, the same on every rank.
	Seed uint64
}

// PowerSGD is the communication hook of PowerSGD (Vogels, Karimireddy and
// Jaggi, 2019, arXiv 1905.13727; PyTorch's powerSGD_hook): each large
// gradient matrix M (with error feedback, the gradient plus what the
// approximation lost last step) travels as two thin factors, P = M·Q
// (rows×r) and Q = Mᵀ·P (cols×r), allreduced one after the other with P
// orthogonalised in between; every rank then uses P·Qᵀ, a rank-r
// approximation of the average of the ranks' M. A bucket's factors of one
// dtype travel as one allreduce each, its uncompressed gradients as one
// more: names Bucket.Name + ".powersgd.p", ".q", ".rest" (".all" during
// warm-up), with the dtype appended. It needs op Average.
//
// Its state (per compressed gradient, the error-feedback residual, slot
// "powersgd.error", of the gradient's shape, and the warm-start Q, slot
// "powersgd.q", stored transposed: r×cols) is part of
// the DistributedOptimizer's State (see StatefulHook). The residuals are
// each rank's own: BroadcastState gives every rank root's, which a
// checkpoint of rank 0 restores everywhere too.
//
// Use one PowerSGD per DistributedOptimizer.
type PowerSGD struct {
	cfg PowerSGDConfig

	mu     sync.Mutex
	errs   map[string]*tensor.Tensor // per parameter, the residual
	qs     map[string]*tensor.Tensor // per parameter, the warm-start Qᵀ (r×cols)
	plans  map[int]*psgdPlan         // per bucket index
	onWire int64                     // bytes allreduced, for tests
}

var _ StatefulHook = (*PowerSGD)(nil)

// NewPowerSGD returns a PowerSGD hook; pass it to WithCommHook.
func NewPowerSGD(cfg PowerSGDConfig) (*PowerSGD, error) {
	switch {
	case cfg.MatrixApproximationRank < 0:
		return nil, fmt.Errorf("optim: PowerSGD: rank %d must not be negative", cfg.MatrixApproximationRank)
	case cfg.StartPowerSGDIter < 0:
		return nil, fmt.Errorf("optim: PowerSGD: start iteration %d must not be negative", cfg.StartPowerSGDIter)
	case cfg.MinCompressionRate < 0 || math.IsNaN(cfg.MinCompressionRate) || math.IsInf(cfg.MinCompressionRate, 0):
		return nil, fmt.Errorf("optim: PowerSGD: minimum compression rate %g must be finite and not negative", cfg.MinCompressionRate)
	case cfg.OrthogonalizationEpsilon < 0 || math.IsNaN(cfg.OrthogonalizationEpsilon) || math.IsInf(cfg.OrthogonalizationEpsilon, 0):
		return nil, fmt.Errorf("optim: PowerSGD: orthogonalization epsilon %g must be finite and not negative", cfg.OrthogonalizationEpsilon)
	}
	if cfg.MatrixApproximationRank == 0 {
		cfg.MatrixApproximationRank = 1
	}
	if cfg.MinCompressionRate == 0 {
		cfg.MinCompressionRate = 2
	}
	return &PowerSGD{cfg: cfg, errs: map[string]*tensor.Tensor{}, qs: map[string]*tensor.Tensor{}, plans: map[int]*psgdPlan{}}, nil
}

// Config returns the configuration, defaults filled in.
func (h *PowerSGD) Config() PowerSGDConfig { return h.cfg }

// checkOp refuses ops other than Average at NewDistributed.
func (h *PowerSGD) checkOp(op tensor.ReduceOp, _ float64) error {
	if op != Average {
		return fmt.Errorf("optim: DistributedOptimizer: PowerSGD averages the gradients' low-rank factors: it needs op Average, not %v", op)
	}
	return nil
}

// psgdPlan is how one bucket travels: per dtype, a lane.
type psgdPlan struct {
	lanes []*psgdLane
	warm  bool // this step is a warm-up step (plain allreduce)
}

// psgdLane is a bucket's gradients of one dtype.
type psgdLane struct {
	dt   tensor.DType
	comp []psgdMatrix // the compressed gradients
	rest []int        // indices in the bucket of the others
	all  *tensor.Tensor
	left *tensor.Tensor // the others, flat
	p, q *tensor.Tensor // the factors of all compressed gradients, flat
}

// psgdMatrix is one compressed gradient: Grads[k] seen as rows×cols, its
// factors at pOff and qOff of the lane's p and q. The factors are stored
// transposed, Pᵀ (rank×rows) and Qᵀ (rank×cols), so that each column of P
// and Q is contiguous: the products then run as long dot products and
// AXPYs (gonum's kernels for P = M·Q with a row-major P of rank columns
// make an AXPY call of length rank per element of M).
type psgdMatrix struct {
	k, rows, cols, rank int
	name                string
	pOff, qOff          int
}

// matrixShape returns the rows and cols of a gradient of shape s, and
// whether it is a matrix at all.
func matrixShape(s tensor.Shape) (rows, cols int, ok bool) {
	if len(s) < 2 {
		return 0, 0, false
	}
	return s[0], s.NumElements() / max(s[0], 1), true
}

// plan returns bucket b's plan, made on first use.
func (h *PowerSGD) plan(b *Bucket) *psgdPlan {
	h.mu.Lock()
	defer h.mu.Unlock()
	if pl := h.plans[b.Index]; pl != nil {
		return pl
	}
	pl := &psgdPlan{}
	byType := map[tensor.DType]*psgdLane{}
	for k, g := range b.Grads {
		dt := g.DType()
		ln := byType[dt]
		if ln == nil {
			ln = &psgdLane{dt: dt}
			byType[dt] = ln
			pl.lanes = append(pl.lanes, ln)
		}
		rows, cols, ok := matrixShape(g.Shape())
		r := min(h.cfg.MatrixApproximationRank, rows, cols)
		if !ok || r == 0 || float64(rows)*float64(cols) <= h.cfg.MinCompressionRate*float64((rows+cols)*r) {
			ln.rest = append(ln.rest, k)
			continue
		}
		m := psgdMatrix{k: k, rows: rows, cols: cols, rank: r, name: b.Params[k].Name}
		if n := len(ln.comp); n > 0 {
			last := ln.comp[n-1]
			m.pOff, m.qOff = last.pOff+last.rows*last.rank, last.qOff+last.cols*last.rank
		}
		ln.comp = append(ln.comp, m)
	}
	for _, ln := range pl.lanes {
		np, nq, nr, na := 0, 0, 0, 0
		for _, m := range ln.comp {
			np += m.rows * m.rank
			nq += m.cols * m.rank
		}
		for _, k := range ln.rest {
			nr += b.Grads[k].Len()
		}
		for _, g := range b.Grads {
			if g.DType() == ln.dt {
				na += g.Len()
			}
		}
		ln.p, ln.q = tensor.New(ln.dt, np), tensor.New(ln.dt, nq)
		ln.left, ln.all = tensor.New(ln.dt, nr), tensor.New(ln.dt, na)
	}
	h.plans[b.Index] = pl
	return pl
}

// Start starts b's allreduces: in warm-up every gradient as it is; after,
// P of the compressed gradients and the others as they are, then,
// orthogonalised P known, Q. It runs in a goroutine (Async).
func (h *PowerSGD) Start(c Collectives, b *Bucket) (Waiter, error) {
	if b.Op != Average {
		return nil, fmt.Errorf("optim: PowerSGD needs op Average, not %v", b.Op)
	}
	pl := h.plan(b)
	pl.warm = b.Step < h.cfg.StartPowerSGDIter
	return Async(func() error {
		var ws waiters
		var first error
		for _, ln := range pl.lanes {
			w, err := h.startLane(c, b, pl.warm, ln)
			if w != nil {
				ws = append(ws, w)
			}
			if err != nil {
				first = err
				break
			}
		}
		if err := ws.Wait(context.Background()); err != nil && first == nil {
			first = err
		}
		return first
	}), nil
}

// allreduce starts one allreduce of t under name and counts its bytes.
func (h *PowerSGD) allreduce(c Collectives, b *Bucket, t *tensor.Tensor, name string) (Waiter, error) {
	h.mu.Lock()
	h.onWire += int64(t.NumBytes())
	h.mu.Unlock()
	w, err := c.AllreduceAsync(t, name, b.Op, b.Prescale, b.Postscale)
	if err != nil {
		return nil, fmt.Errorf("optim: PowerSGD: allreduce %q: %w", name, err)
	}
	return w, nil
}

// startLane does one lane's work, waiting for its P and Q but returning
// the Waiter of the uncompressed gradients' allreduce.
func (h *PowerSGD) startLane(c Collectives, b *Bucket, warm bool, ln *psgdLane) (Waiter, error) {
	suffix := "." + strings.ToLower(ln.dt.String())
	if warm {
		gather(ln.all, b.Grads, nil, ln.dt)
		return h.allreduce(c, b, ln.all, b.Name+".powersgd.all"+suffix)
	}
	var rest Waiter
	if len(ln.rest) > 0 {
		gather(ln.left, b.Grads, ln.rest, ln.dt)
		w, err := h.allreduce(c, b, ln.left, b.Name+".powersgd.rest"+suffix)
		if err != nil {
			return nil, err
		}
		rest = w
	}
	if len(ln.comp) == 0 {
		return rest, nil
	}
	var err error
	switch ln.dt {
	case tensor.Float32:
		err = powerLane[float32](h, c, b, ln, suffix)
	case tensor.Float64:
		err = powerLane[float64](h, c, b, ln, suffix)
	default:
		err = fmt.Errorf("optim: PowerSGD: gradients of %v (float32 or float64 only)", ln.dt)
	}
	return rest, err
}

// gather copies the gradients of dtype dt (those of index idx, or all)
// into flat, one after another.
func gather(flat *tensor.Tensor, grads []*tensor.Tensor, idx []int, dt tensor.DType) {
	dst := flat.Bytes()
	each(grads, idx, dt, func(g *tensor.Tensor) { dst = dst[copy(dst, g.Bytes()):] })
}

// scatter copies flat back into the gradients gather took.
func scatter(grads []*tensor.Tensor, idx []int, dt tensor.DType, flat *tensor.Tensor) {
	src := flat.Bytes()
	each(grads, idx, dt, func(g *tensor.Tensor) { src = src[copy(g.Bytes(), src):] })
}

func each(grads []*tensor.Tensor, idx []int, dt tensor.DType, f func(*tensor.Tensor)) {
	if idx != nil {
		for _, k := range idx {
			f(grads[k])
		}
		return
	}
	for _, g := range grads {
		if g.DType() == dt {
			f(g)
		}
	}
}

// powerLane computes M = grad + residual in each compressed gradient,
// P = M·Q, allreduces P, orthogonalises it, computes Q = Mᵀ·P and
// allreduces Q, waiting for both. The persistent state is only read.
func powerLane[T float32 | float64](h *PowerSGD, c Collectives, b *Bucket, ln *psgdLane, suffix string) error {
	ps, qs := tensor.View[T](ln.p), tensor.View[T](ln.q)
	for _, m := range ln.comp {
		g := tensor.View[T](b.Grads[m.k])
		h.mu.Lock()
		e, q := h.errs[m.name], h.qs[m.name]
		h.mu.Unlock()
		if e != nil && (e.DType() != b.Grads[m.k].DType() || !e.Shape().Equal(b.Grads[m.k].Shape())) {
			e = nil // restored from a state that does not fit: start afresh
		}
		if q != nil && (q.DType() != ln.dt || q.Len() != m.cols*m.rank) {
			q = nil
		}
		if e != nil && !h.cfg.NoErrorFeedback {
			for i, v := range tensor.View[T](e) {
				g[i] += v
			}
		}
		qm := qs[m.qOff : m.qOff+m.cols*m.rank]
		if q != nil && !h.cfg.NoWarmStart {
			copy(qm, tensor.View[T](q))
		} else {
			randomQ(qm, h.cfg.Seed, m.name, b.Step)
		}
		// Pᵀ = Qᵀ·Mᵀ
		gemm(blas.NoTrans, blas.Trans, m.rank, m.rows, m.cols, qm, m.cols, g, m.cols, ps[m.pOff:m.pOff+m.rows*m.rank], m.rows)
	}
	w, err := h.allreduce(c, b, ln.p, b.Name+".powersgd.p"+suffix)
	if err != nil {
		return err
	}
	if err := w.Wait(context.Background()); err != nil {
		return fmt.Errorf("optim: PowerSGD: allreduce of P: %w", err)
	}
	for _, m := range ln.comp {
		p := ps[m.pOff : m.pOff+m.rows*m.rank]
		orthogonalize(p, m.rank, m.rows, T(h.cfg.OrthogonalizationEpsilon))
		// Qᵀ = Pᵀ·M
		gemm(blas.NoTrans, blas.NoTrans, m.rank, m.cols, m.rows, p, m.rows, tensor.View[T](b.Grads[m.k]), m.cols, qs[m.qOff:m.qOff+m.cols*m.rank], m.cols)
	}
	if w, err = h.allreduce(c, b, ln.q, b.Name+".powersgd.q"+suffix); err != nil {
		return err
	}
	if err := w.Wait(context.Background()); err != nil {
		return fmt.Errorf("optim: PowerSGD: allreduce of Q: %w", err)
	}
	return nil
}

// randomQ fills q with standard normal values from a generator seeded by
// seed, the parameter's name and the step: the same on every rank.
func randomQ[T float32 | float64](q []T, seed uint64, name string, step int) {
	f := fnv.New64a()
	f.Write([]byte(name))
	rng := rand.New(rand.NewPCG(seed, f.Sum64()^uint64(step)*0x9e3779b97f4a7c15))
	for i := range q {
		q[i] = T(rng.NormFloat64())
	}
}

// orthogonalize makes the n vectors of length dim, one after another in
// v (the columns of P, stored as the rows of Pᵀ), orthonormal, in order:
// Gram-Schmidt, each vector's projections on the vectors before it
// removed twice (which keeps it orthogonal in floating point), then
// divided by its norm plus eps. A vector that was zero, or that is a
// combination of those before it up to rounding (a gradient of lower rank
// than the approximation's), becomes zero: torch would divide the rounding
// noise by its norm and get a vector that is not orthogonal to the others.
func orthogonalize[T float32 | float64](v []T, n, dim int, eps T) {
	tol := 1e-12
	if _, ok := any(eps).(float32); ok {
		tol = 1e-5
	}
	norm := func(x []T) float64 {
		var s float64
		for _, e := range x {
			s += float64(e) * float64(e)
		}
		return math.Sqrt(s)
	}
	for i := range n {
		x := v[i*dim : (i+1)*dim]
		before := norm(x)
		for range 2 {
			for j := range i {
				y := v[j*dim : (j+1)*dim]
				var dot T
				for k, e := range y {
					dot += e * x[k]
				}
				for k, e := range y {
					x[k] -= dot * e
				}
			}
		}
		after := norm(x)
		d := T(after) + eps
		if after <= tol*before || d == 0 {
			clear(x)
			continue
		}
		for k := range x {
			x[k] /= d
		}
	}
}

// gemm is C = op(A)·op(B) (m×n, k inner) on row-major slices, with
// gonum's BLAS.
func gemm[T float32 | float64](tA, tB blas.Transpose, m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int) {
	switch a := any(a).(type) {
	case []float32:
		blas32.Implementation().Sgemm(tA, tB, m, n, k, 1, a, lda, any(b).([]float32), ldb, 0, any(c).([]float32), ldc)
	case []float64:
		blas64.Implementation().Dgemm(tA, tB, m, n, k, 1, a, lda, any(b).([]float64), ldb, 0, any(c).([]float64), ldc)
	}
}

// Finish writes into each compressed gradient its approximation P·Qᵀ,
// keeps what it lost as the residual (error feedback) and Q (warm start),
// and copies the others back.
func (h *PowerSGD) Finish(b *Bucket) error {
	h.mu.Lock()
	pl := h.plans[b.Index]
	h.mu.Unlock()
	if pl == nil {
		return errors.New("optim: PowerSGD: Finish of a bucket it did not start")
	}
	for _, ln := range pl.lanes {
		if pl.warm {
			scatter(b.Grads, nil, ln.dt, ln.all)
			continue
		}
		if len(ln.rest) > 0 {
			scatter(b.Grads, ln.rest, ln.dt, ln.left)
		}
		switch ln.dt {
		case tensor.Float32:
			finishLane[float32](h, b, ln)
		case tensor.Float64:
			finishLane[float64](h, b, ln)
		}
	}
	return nil
}

func finishLane[T float32 | float64](h *PowerSGD, b *Bucket, ln *psgdLane) {
	ps, qs := tensor.View[T](ln.p), tensor.View[T](ln.q)
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range ln.comp {
		g := b.Grads[m.k]
		p, q := ps[m.pOff:m.pOff+m.rows*m.rank], qs[m.qOff:m.qOff+m.cols*m.rank]
		if !h.cfg.NoErrorFeedback {
			e := h.errs[m.name]
			if e == nil || !e.Shape().Equal(g.Shape()) || e.DType() != g.DType() {
				e = tensor.New(g.DType(), g.Shape()...)
				h.errs[m.name] = e
			}
			copy(e.Bytes(), g.Bytes()) // M
		}
		gv := tensor.View[T](g)
		// P·Qᵀ = (Pᵀ)ᵀ·Qᵀ
		gemm(blas.Trans, blas.NoTrans, m.rows, m.cols, m.rank, p, m.rows, q, m.cols, gv, m.cols)
		if !h.cfg.NoErrorFeedback {
			ev := tensor.View[T](h.errs[m.name])
			for i, v := range gv {
				ev[i] -= v
			}
		}
		if !h.cfg.NoWarmStart {
			qt := h.qs[m.name]
			if qt == nil || qt.Len() != len(q) || qt.DType() != g.DType() {
				qt = tensor.New(g.DType(), m.rank, m.cols)
				h.qs[m.name] = qt
			}
			copy(tensor.View[T](qt), q)
		}
	}
}

// StatePrefix returns "powersgd.".
func (h *PowerSGD) StatePrefix() string { return "powersgd." }

// HookState returns the residuals (SlotKey(param, "powersgd.error")) and
// warm-start Qs (SlotKey(param, "powersgd.q")) of the gradients
// compressed so far.
func (h *PowerSGD) HookState() *State {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &State{Kind: "powersgd", Scalars: map[string]float64{}, Tensors: map[string]*tensor.Tensor{}}
	for name, e := range h.errs {
		s.Tensors[SlotKey(name, "powersgd.error")] = e.Clone()
	}
	for name, q := range h.qs {
		s.Tensors[SlotKey(name, "powersgd.q")] = q.Clone()
	}
	return s
}

// SetHookState replaces the residuals and Qs by copies of s's. A tensor
// whose shape does not fit its gradient is replaced by a fresh one (zero
// residual, random Q) when first used.
func (h *PowerSGD) SetHookState(s *State) error {
	errs, qs := map[string]*tensor.Tensor{}, map[string]*tensor.Tensor{}
	for k := range s.Scalars {
		return fmt.Errorf("%w: PowerSGD has no scalar %q", ErrState, k)
	}
	for k, t := range s.Tensors {
		i := strings.LastIndexByte(k, '/')
		if i < 0 {
			return fmt.Errorf("%w: PowerSGD state key %q is not param/slot", ErrState, k)
		}
		if t.Device().Kind != tensor.CPU || (t.DType() != tensor.Float32 && t.DType() != tensor.Float64) {
			return fmt.Errorf("%w: PowerSGD tensor %q is %v", ErrState, k, t)
		}
		switch name, slot := k[:i], k[i+1:]; slot {
		case "powersgd.error":
			errs[name] = t.Clone()
		case "powersgd.q":
			qs[name] = t.Clone()
		default:
			return fmt.Errorf("%w: PowerSGD has no slot %q", ErrState, slot)
		}
	}
	h.mu.Lock()
	h.errs, h.qs = errs, qs
	h.mu.Unlock()
	return nil
}

// BytesAllreduced returns the bytes the hook has allreduced since it was
// made: the factors P and Q and the uncompressed gradients.
func (h *PowerSGD) BytesAllreduced() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.onWire
}
