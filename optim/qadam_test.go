package optim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gohorovod/gohorovod/tensor"
)

// qadamConfig is the QAdam of the tests (with an L2 weight decay, so
// that the momentum formula's p term is exercised).
func qadamConfig(warmup int) QAdamConfig {
	return QAdamConfig{AdamConfig: AdamConfig{LR: 0.01, WeightDecay: 0.01}, Warmup: warmup}
}

// newQAdamDist wraps a QAdam over psgdParams with its Hook.
func newQAdamDist(coll Collectives, warmup int) (*DistributedOptimizer, *QAdam, error) {
	q, err := NewQAdam(psgdParams(), qadamConfig(warmup))
	if err != nil {
		return nil, nil, err
	}
	opt, err := NewDistributed(q, coll, WithCommHook(q.Hook()))
	return opt, q, err
}

// qadamMomenta returns, per parameter, every rank's momentum at step
// from q's state (the same on every rank) and the ranks' gradients,
// concatenated in bucket order (backward), per rank: QAdam's formula
// m = β1·m + (1−β1)·(g + wd·p), in the parameter's precision.
func qadamMomenta(q *QAdam, size, step int) [][]float32 {
	st := q.State()
	b1, wd := st.Scalars["beta1"], st.Scalars["weight_decay"]
	xs := make([][]float32, size)
	ps := q.Params()
	for r := range size {
		for i := len(ps) - 1; i >= 0; i-- {
			m := asFloat64s(st.Tensors[SlotKey(ps[i].Name, "exp_avg")])
			p := asFloat64s(ps[i].Value)
			for k, g := range psgdGrad(r, step, i) {
				if ps[i].Value.DType() == tensor.Float32 {
					b1f, wdf := float32(b1), float32(wd)
					xs[r] = append(xs[r], b1f*float32(m[k])+(1-b1f)*(float32(g)+wdf*float32(p[k])))
				} else {
					xs[r] = append(xs[r], float32(b1*m[k]+(1-b1)*(g+wd*p[k])))
				}
			}
		}
	}
	return xs
}

// qadamRun runs steps of QAdam (warm-up 2) on rank of coll; after the
// warm-up, each step's synchronized gradients must be bit for bit the
// reference exchange (byteGradReference) of the ranks' momenta, and the
// step must leave them as the momentum, the second moment unchanged, and
// the parameters moved by Adam's formula.
func qadamRun(ctx context.Context, coll Collectives, rank, steps int) ([][]float64, error) {
	const warmup = 2
	opt, q, err := newQAdamDist(coll, warmup)
	if err != nil {
		return nil, err
	}
	defer opt.Close()
	size := coll.Size()
	for s := range steps {
		var want []float32
		if s >= warmup {
			want, _, _ = byteGradReference(qadamMomenta(q, size, s), 1/float64(size), nil)
		}
		before, p0 := q.State(), snapshotFloat64s(q.Params())
		check := func() error {
			if want == nil {
				return nil
			}
			return sameAsBucket(opt.Params(), want)
		}
		if err := psgdStep(ctx, opt, rank, s, check); err != nil {
			return nil, err
		}
		if s >= warmup {
			if err := checkQAdamStep(q, before, p0, want); err != nil {
				return nil, fmt.Errorf("step %d: %w", s, err)
			}
		}
	}
	return snapshotFloat64s(q.Params()), nil
}

// sameAsBucket checks that the gradients of ps, concatenated in backward
// order, are want (converted to their precision).
func sameAsBucket(ps []Param, want []float32) error {
	off := 0
	for i := len(ps) - 1; i >= 0; i-- {
		for k, v := range asFloat64s(ps[i].Grad) {
			if v != float64(want[off+k]) {
				return fmt.Errorf("%s[%d] = %g, reference %g", ps[i].Name, k, v, want[off+k])
			}
		}
		off += ps[i].Grad.Len()
	}
	return nil
}

// checkQAdamStep checks a post-warm-up step against the state and
// parameters before it: the momentum is the exchanged one, the second
// moment is unchanged, and each parameter moved by
// lr/(1−β1^t)·m/(sqrt(v)/sqrt(1−β2^t)+eps) (within float32 rounding).
func checkQAdamStep(q *QAdam, before *State, p0 [][]float64, momenta []float32) error {
	after := q.State()
	h := before.Scalars
	t := after.Scalars["step"]
	step := h["lr"] / (1 - math.Pow(h["beta1"], t))
	sq2 := math.Sqrt(1 - math.Pow(h["beta2"], t))
	off := 0
	ps := q.Params()
	for i := len(ps) - 1; i >= 0; i-- {
		name := ps[i].Name
		m := asFloat64s(after.Tensors[SlotKey(name, "exp_avg")])
		v0 := asFloat64s(before.Tensors[SlotKey(name, "exp_avg_sq")])
		v1 := asFloat64s(after.Tensors[SlotKey(name, "exp_avg_sq")])
		p1 := asFloat64s(ps[i].Value)
		for k := range m {
			if m[k] != float64(momenta[off+k]) || v0[k] != v1[k] {
				return fmt.Errorf("%s[%d]: momentum %g (want %g), second moment %g → %g (frozen)", name, k, m[k], momenta[off+k], v0[k], v1[k])
			}
			want := p0[i][k] - step*m[k]/(math.Sqrt(v0[k])/sq2+h["eps"])
			if math.Abs(p1[k]-want) > 1e-6*math.Max(1, math.Abs(want)) {
				return fmt.Errorf("%s[%d] = %g after the step, want %g", name, k, p1[k], want)
			}
		}
		off += len(m)
	}
	return nil
}

// snapshotFloat64s returns the values of ps as float64s.
func snapshotFloat64s(ps []Param) [][]float64 {
	out := make([][]float64, len(ps))
	for i, p := range ps {
		out[i] = slices.Clone(asFloat64s(p.Value))
	}
	return out
}

// TestQAdamReference: over the runtime's in-memory transport at 2, 3 and
// 4 ranks, QAdam's post-warm-up steps exchange exactly the reference's
// averaged momenta and step by the formula, and every rank ends with the
// same parameters.
func TestQAdamReference(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			got := make([][]float64, n)
			onColls(t, startRuntimes(t, n), func(ctx context.Context, coll Collectives, rank int) error {
				p, err := qadamRun(ctx, coll, rank, 5)
				got[rank] = flatten(p)
				return err
			})
			for r := 1; r < n; r++ {
				if err := closeTo(got[r], got[0], 0); err != nil {
					t.Fatalf("rank %d differs from rank 0: %v", r, err)
				}
			}
		})
	}
}

// TestQAdamEmbedded is TestQAdamReference over the embedded transport.
func TestQAdamEmbedded(t *testing.T) {
	const n = 3
	onColls(t, startEmbedded(t, n), func(ctx context.Context, coll Collectives, rank int) error {
		_, err := qadamRun(ctx, coll, rank, 4)
		return err
	})
}

func flatten(vs [][]float64) []float64 {
	var out []float64
	for _, v := range vs {
		out = append(out, v...)
	}
	return out
}

// TestQAdamWarmupIsAdam: with a warm-up longer than the run, QAdam ends
// with the parameters of Adam under the DistributedOptimizer, bit for
// bit.
func TestQAdamWarmupIsAdam(t *testing.T) {
	const n, steps = 3, 6
	onColls(t, startRuntimes(t, n), func(ctx context.Context, coll Collectives, rank int) error {
		adam, err := NewAdam(psgdParams(), qadamConfig(0).AdamConfig)
		if err != nil {
			return err
		}
		plain, err := NewDistributed(adam, coll)
		if err != nil {
			return err
		}
		defer plain.Close()
		q, _, err := newQAdamDist(coll, steps+1)
		if err != nil {
			return err
		}
		defer q.Close()
		for s := range steps {
			if err := psgdStep(ctx, plain, rank, s, nil); err != nil {
				return err
			}
			if err := psgdStep(ctx, q, rank, s, nil); err != nil {
				return err
			}
		}
		want, got := flatten(snapshotFloat64s(plain.Params())), flatten(snapshotFloat64s(q.Params()))
		for k := range want {
			if math.Float64bits(got[k]) != math.Float64bits(want[k]) {
				return fmt.Errorf("value %d: QAdam %g, Adam %g", k, got[k], want[k])
			}
		}
		return nil
	})
}

// TestQAdamErrors: a warm-up below 1 is refused by NewQAdam (before any
// communication, on every rank alike); Sum is refused at NewDistributed;
// a post-warm-up Step whose gradients did not come through the Hook
// fails with ErrQAdamHook.
func TestQAdamErrors(t *testing.T) {
	for _, w := range []int{0, -3} {
		if _, err := NewQAdam(psgdParams(), qadamConfig(w)); err == nil || !containsAll(err.Error(), "warmup", "at least 1") {
			t.Fatalf("warmup %d: %v", w, err)
		}
	}
	q, err := NewQAdam(psgdParams(), qadamConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewDistributed(q, groupColls(1)[0], WithCommHook(q.Hook()), WithOp(Sum)); err == nil || !containsAll(err.Error(), "QAdam", "Average") {
		t.Fatalf("Sum: %v", err)
	}
	if err := q.Step(); err != nil {
		t.Fatalf("warm-up step: %v", err)
	}
	if err := q.Step(); !errors.Is(err, ErrQAdamHook) {
		t.Fatalf("a step after warm-up without the hook: %v", err)
	}
	st := q.State()
	if st.Kind != "qadam" || st.Scalars["warmup"] != 1 {
		t.Fatalf("state: %q, warmup %v", st.Kind, st.Scalars["warmup"])
	}
}
