package optim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
	"unsafe"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// TestRuntimeLayouts: over the runtime, every way of laying out and
// bucketing the gradients trains the linear model exactly as one process
// does, and Close releases the groups.
func TestRuntimeLayouts(t *testing.T) {
	const steps = 20
	want, err := equivalenceRun(context.Background(), nil, 0, 1, steps)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		opts []DistOption
	}{
		{"default", nil},
		{"bucket per gradient", []DistOption{BucketBytes(0)}},
		{"small buckets", []DistOption{BucketBytes(8)}},
		{"no flat storage", []DistOption{FlatGradients(false)}},
		{"flat storage", []DistOption{FlatGradients(true)}},
		{"flat storage, bucket per gradient", []DistOption{FlatGradients(true), BucketBytes(0)}},
		{"forward order", []DistOption{BackwardOrder("w", "b")}},
		{"predivide", []DistOption{GradientPredivideFactor(2)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkRuntimeEquivalence(t, 2, steps, want, 1e-12, c.opts...)
		})
	}
}

// flatModel is a model of float32 and float64 parameters whose gradients
// it writes through Param.Grad, in backward order, reporting each Ready.
type flatModel struct{ params []Param }

func newFlatModel() *flatModel {
	return &flatModel{params: []Param{
		{Name: "a", Value: tensor.New(tensor.Float32, 3, 2), Grad: tensor.New(tensor.Float32, 3, 2)},
		{Name: "b", Value: tensor.New(tensor.Float64, 4), Grad: tensor.New(tensor.Float64, 4)},
		{Name: "c", Value: tensor.New(tensor.Float32, 5), Grad: tensor.New(tensor.Float32, 5)},
		{Name: "d", Value: tensor.New(tensor.Float64, 1), Grad: tensor.New(tensor.Float64, 1)},
	}}
}

// backward writes gradient j of parameter i as rank+1+10i+j.
func (m *flatModel) backward(rank int, ready func(Param) error) error {
	for i := len(m.params) - 1; i >= 0; i-- {
		g := m.params[i].Grad
		v := make([]float64, g.Len())
		for j := range v {
			v[j] = float64(rank + 1 + 10*i + j)
		}
		setFloat64s(g, v)
		if err := ready(m.params[i]); err != nil {
			return err
		}
	}
	return nil
}

// TestFlatGradients: with FlatGradients(true) on the runtime, the
// gradients are moved into one flat buffer per dtype, in backward order
// (same tensor objects, values kept), they are averaged correctly, the
// runtime reduces them where they lie, and with FlatGradients(false) (the
// default) they stay where they were and go through the fusion buffer.
func TestFlatGradients(t *testing.T) {
	for _, flat := range []bool{true, false} {
		t.Run(fmt.Sprint("flat=", flat), func(t *testing.T) {
			const n = 2
			rts := startRuntimes(t, n)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			onRanks(t, n, func(rank int) error {
				coll, err := FromRuntime(rts[rank])
				if err != nil {
					return err
				}
				m := newFlatModel()
				setFloat64s(m.params[1].Grad, []float64{1, 2, 3, 4})
				grads := make([]*tensor.Tensor, len(m.params))
				storage := make([][]byte, len(m.params))
				for i, p := range m.params {
					grads[i], storage[i] = p.Grad, p.Grad.Bytes()
				}
				inner, _ := NewSGD(m.params, SGDConfig{LR: 0.1})
				opt, err := NewDistributed(inner, coll, FlatGradients(flat))
				if err != nil {
					return err
				}
				for i, p := range m.params {
					if p.Grad != grads[i] {
						return fmt.Errorf("%s: the gradient tensor was replaced", p.Name)
					}
					if moved := &p.Grad.Bytes()[0] != &storage[i][0]; moved != flat {
						return fmt.Errorf("%s: moved %v with FlatGradients(%v)", p.Name, moved, flat)
					}
				}
				if got := asFloat64s(m.params[1].Grad); !slices.Equal(got, []float64{1, 2, 3, 4}) {
					return fmt.Errorf("b's gradient after the move %v, want its values kept", got)
				}
				if flat {
					// Backward order d, c, b, a, one buffer per dtype: a
					// follows c, and b follows d.
					if !tensor.Follows(m.params[0].Grad, m.params[2].Grad) || !tensor.Follows(m.params[1].Grad, m.params[3].Grad) {
						return errors.New("the flat buffers are not in backward order")
					}
				}
				for range 3 {
					if err := opt.ZeroGrad(); err != nil {
						return err
					}
					if err := m.backward(rank, opt.Ready); err != nil {
						return err
					}
					if err := opt.Synchronize(ctx); err != nil {
						return err
					}
					for i, p := range m.params {
						got := asFloat64s(p.Grad)
						for j, v := range got {
							if want := 1.5 + float64(10*i+j); v != want { // mean of rank+1 over 2 ranks
								return fmt.Errorf("%s[%d] = %g, want %g", p.Name, j, v, want)
							}
						}
					}
				}
				return opt.Close()
			})
			s := rts[0].Stats()
			if flat && (s.FusedInPlace == 0 || s.FusedCopied != 0) {
				t.Fatalf("flat gradients: %d bytes fused in place, %d copied; want all in place", s.FusedInPlace, s.FusedCopied)
			}
			if !flat && s.FusedInPlace != 0 {
				t.Fatalf("separate gradients: %d bytes fused in place", s.FusedInPlace)
			}
		})
	}
}

// TestStaleGradient: with FlatGradients(true), a model that keeps writing
// into the slices it took before NewDistributed moved its gradients fails the first step with
// ErrStaleGradient (on every rank, without hanging), instead of silently
// training nothing.
func TestStaleGradient(t *testing.T) {
	const n = 2
	rts := startRuntimes(t, n)
	onRanks(t, n, func(rank int) error {
		coll, err := FromRuntime(rts[rank])
		if err != nil {
			return err
		}
		m := newFlatModel()
		stale := m.params[2].Grad.Float32s() // taken before the move
		inner, _ := NewSGD(m.params, SGDConfig{LR: 0.1})
		opt, err := NewDistributed(inner, coll, FlatGradients(true))
		if err != nil {
			return err
		}
		stale[0] = 1
		if err := opt.Ready(m.params[2]); !errors.Is(err, ErrStaleGradient) {
			return fmt.Errorf("Ready after a write to the former storage = %v, want ErrStaleGradient", err)
		}
		if err := opt.Step(); !errors.Is(err, ErrStaleGradient) {
			return fmt.Errorf("Step = %v, want ErrStaleGradient", err)
		}
		// Checked once: the step after goes on (the check is a guard for
		// the first step, not a cost of every step).
		if err := opt.Step(); err != nil {
			return fmt.Errorf("the next step: %v", err)
		}
		return opt.Close()
	})
}

// TestClose: Close refuses while reductions are in flight (after Ready,
// and after a cancelled Synchronize), works once the step is finished or
// the runtime is shut down, is idempotent, and Ready and Step fail after
// it.
func TestClose(t *testing.T) {
	rts := startRuntimes(t, 2)
	coll, err := FromRuntime(rts[0])
	if err != nil {
		t.Fatal(err)
	}
	m := newLinear(3, 1)
	inner, _ := NewSGD(m.params, SGDConfig{LR: 0.1})
	opt, err := NewDistributed(inner, coll, BucketBytes(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := opt.Ready(m.params[1]); err != nil {
		t.Fatal(err)
	}
	if err := opt.Close(); !errors.Is(err, ErrInFlight) {
		t.Fatalf("Close with a reduction started = %v, want ErrInFlight", err)
	}
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := opt.Synchronize(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Synchronize without rank 1 = %v, want a deadline error", err)
	}
	if err := opt.Close(); !errors.Is(err, ErrInFlight) {
		t.Fatalf("Close after a cancelled Synchronize = %v, want ErrInFlight", err)
	}
	if err := hvd.StopLocal(rts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	if err := opt.Synchronize(ctx); !errors.Is(err, hvd.ErrShutdown) {
		t.Fatalf("Synchronize after shutdown = %v, want ErrShutdown", err)
	}
	if err := opt.Close(); err != nil {
		t.Fatalf("Close after the failed step = %v", err)
	}
	if err := opt.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := opt.Ready(m.params[0]); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ready after Close = %v, want ErrClosed", err)
	}
	if err := opt.Step(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Step after Close = %v, want ErrClosed", err)
	}
}

// TestCloseReleasesNames: after Close, the runtime takes the parameters'
// names again (a second optimizer over the same parameters works), while
// an open optimizer holds them.
func TestCloseReleasesNames(t *testing.T) {
	const n = 2
	rts := startRuntimes(t, n)
	onRanks(t, n, func(rank int) error {
		coll, err := FromRuntime(rts[rank])
		if err != nil {
			return err
		}
		m := newLinear(2, 1)
		inner, _ := NewSGD(m.params, SGDConfig{LR: 0.1})
		opt, err := NewDistributed(inner, coll)
		if err != nil {
			return err
		}
		if _, err := NewDistributed(inner, coll); !errors.Is(err, hvd.ErrDuplicateName) {
			return fmt.Errorf("a second optimizer while the first holds the names: %v, want ErrDuplicateName", err)
		}
		if err := opt.Step(); err != nil {
			return err
		}
		if err := opt.Close(); err != nil {
			return err
		}
		again, err := NewDistributed(inner, coll)
		if err != nil {
			return fmt.Errorf("a second optimizer after Close: %v", err)
		}
		if err := again.Step(); err != nil {
			return err
		}
		return again.Close()
	})
}

// TestFlatOptionErrors: bad bucket sizes and backward orders are refused.
func TestFlatOptionErrors(t *testing.T) {
	m := newLinear(2, 1)
	inner, _ := NewSGD(m.params, SGDConfig{LR: 0.1})
	g := newGroup(1)
	for name, opts := range map[string][]DistOption{
		"negative bucket": {BucketBytes(-1)},
		"unknown name":    {BackwardOrder("b", "x")},
		"name twice":      {BackwardOrder("b", "b")},
		"missing name":    {BackwardOrder("b")},
	} {
		if _, err := NewDistributed(inner, member{g, 0}, opts...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// On a Collectives without groups Close only closes.
	opt, err := NewDistributed(inner, member{g, 0})
	if err != nil {
		t.Fatal(err)
	}
	if err := opt.Close(); err != nil {
		t.Fatal(err)
	}
	if err := opt.Step(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Step after Close = %v", err)
	}
}

// TestFlatGradientsAligned: gradients of alignLarge bytes or more start on
// a cache line of the flat buffer (the backward kernels write them much
// faster there); smaller ones stay back to back, and so does every gradient
// of MNIST's MLP in backward order, the padding going before the first:
// the runtime reduces one run of memory in one call.
func TestFlatGradientsAligned(t *testing.T) {
	shapes := []tensor.Shape{{10}, {1280}, {128}, {256, 128}, {256}, {784, 256}}
	parts := alignedFlat(tensor.Float32, shapes)
	for k, p := range parts {
		if !p.Shape().Equal(shapes[k]) {
			t.Fatalf("part %d has shape %v, want %v", k, p.Shape(), shapes[k])
		}
		addr := uintptr(unsafe.Pointer(&p.Float32s()[0]))
		if p.NumBytes() >= 64<<10 && addr%64 != 0 {
			t.Errorf("part %d (%d bytes) starts at %#x, not on a cache line", k, p.NumBytes(), addr)
		}
	}
	for k := 1; k < len(parts); k++ {
		if !tensor.Follows(parts[k], parts[k-1]) {
			t.Errorf("part %d does not follow part %d", k, k-1)
		}
	}
	// Two large gradients with an odd-sized one between them: the second
	// needs padding of its own, and still starts on a cache line.
	odd := alignedFlat(tensor.Float32, []tensor.Shape{{3}, {128, 128}, {5}, {128, 128}})
	for k, p := range odd {
		if addr := uintptr(unsafe.Pointer(&p.Float32s()[0])); p.NumBytes() >= 64<<10 && addr%64 != 0 {
			t.Errorf("odd layout: part %d starts at %#x, not on a cache line", k, addr)
		}
	}
	if !tensor.Follows(odd[1], odd[0]) || !tensor.Follows(odd[2], odd[1]) || tensor.Follows(odd[3], odd[2]) {
		t.Error("odd layout: want the first three back to back and padding before the fourth")
	}
	for i := range parts {
		for j := range parts[i].Float32s() {
			parts[i].Float32s()[j] = float32(i)
		}
	}
	for i := range parts {
		for _, v := range parts[i].Float32s() {
			if v != float32(i) {
				t.Fatalf("parts overlap: part %d holds %v", i, v)
			}
		}
	}
}
