package optim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	hvd "github.com/gohorovod/gohorovod/runtime"
)

// linearBatch is the global batch of step s for the linear model of the
// runtime and cancellation tests: batch rows of d inputs, and the targets.
func linearBatch(s, d, batch int) ([]float64, []float64) {
	r := rand.New(rand.NewPCG(uint64(s), 11))
	xs, ys := make([]float64, batch*d), make([]float64, batch)
	for i := range xs {
		xs[i] = r.NormFloat64()
	}
	for i := range ys {
		ys[i] = r.NormFloat64() + 2*xs[i*d]
	}
	return xs, ys
}

// retryKind is how rank 0 is cancelled at the cut step and how it goes on.
type retryKind int

const (
	retryStepContext  retryKind = iota // StepContext cancelled, StepContext again
	retryStep                          // StepContext cancelled, Step
	retrySynchronize                   // Synchronize cancelled, Synchronize again, then the wrapped Step
	retryNoCancelling                  // the reference: no step is cancelled
)

func (k retryKind) String() string {
	return [...]string{"StepContext", "Step", "Synchronize", "uncancelled"}[k]
}

// cancelRun trains a linear model for steps on rank's share of each global
// batch through coll and returns the final parameters. At step cut, rank 1
// holds its backward back until rank 0's step, run with a short deadline,
// has been cancelled (release); rank 0 checks that ZeroGrad and Ready
// refuse, before and after it lets rank 1 go (rank 1's reduction then
// completes rank 0's in rank 1's goroutine, writing rank 0's gradients), and
// retries as kind says. With retryNoCancelling nothing is held back. Every
// wait ends with ctx, which the caller cancels when a rank fails.
func cancelRun(ctx context.Context, coll Collectives, rank, size, steps, cut int, release chan struct{}, kind retryKind, opts ...DistOption) ([]float64, error) {
	const d, batch = 6, 24
	m := newLinear(d, uint64(rank)+1)
	if err := BroadcastParameters(ctx, coll, m.params, 0); err != nil {
		return nil, err
	}
	inner, err := NewSGD(m.params, SGDConfig{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3})
	if err != nil {
		return nil, err
	}
	opt, err := NewDistributed(inner, coll, opts...)
	if err != nil {
		return nil, err
	}
	per := batch / size
	for s := range steps {
		xs, ys := linearBatch(s, d, batch)
		if err := opt.ZeroGrad(); err != nil {
			return nil, fmt.Errorf("step %d: %w", s, err)
		}
		held := s == cut && kind != retryNoCancelling
		if held && rank == 1 {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, fmt.Errorf("step %d: held back: %w", s, ctx.Err())
			}
		}
		if err := m.backward(xs[rank*per*d:(rank+1)*per*d], ys[rank*per:(rank+1)*per], opt.Ready); err != nil {
			return nil, fmt.Errorf("step %d: %w", s, err)
		}
		if !held || rank != 0 {
			if err := opt.StepContext(ctx); err != nil {
				return nil, fmt.Errorf("step %d: %w", s, err)
			}
			continue
		}
		if err := cancelAndRetry(ctx, opt, m, release, kind); err != nil {
			return nil, fmt.Errorf("step %d: %w", s, err)
		}
	}
	return append(slices.Clone(m.w), m.b...), nil
}

// cancelAndRetry is rank 0's cut step after backward.
func cancelAndRetry(ctx context.Context, opt *DistributedOptimizer, m *linear, release chan struct{}, kind retryKind) error {
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	var err error
	if kind == retrySynchronize {
		err = opt.Synchronize(short)
	} else {
		err = opt.StepContext(short)
	}
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		close(release)
		return fmt.Errorf("%v with rank 1 held back = %v, want a deadline error", kind, err)
	}
	refused := func(when string) error {
		if err := opt.ZeroGrad(); !errors.Is(err, ErrInFlight) {
			return fmt.Errorf("ZeroGrad %s = %v, want ErrInFlight", when, err)
		}
		for _, p := range m.params {
			if err := opt.Ready(p); !errors.Is(err, ErrInFlight) {
				return fmt.Errorf("Ready(%s) %s = %v, want ErrInFlight", p.Name, when, err)
			}
		}
		return nil
	}
	if err := refused("after the cancelled step"); err != nil {
		close(release)
		return err
	}
	close(release)
	// Rank 1 now completes the reductions; ZeroGrad must still keep off
	// the gradients that they write (the race detector watches).
	if err := refused("while rank 1 completes the reductions"); err != nil {
		return err
	}
	switch kind {
	case retryStepContext:
		return opt.StepContext(ctx)
	case retryStep:
		return opt.Step()
	default:
		if err := opt.Synchronize(ctx); err != nil {
			return err
		}
		return opt.Unwrap().Step()
	}
}

// TestCancelledStepRetried: rank 0's step is cancelled while rank 1 lags;
// rank 0 retries, and both ranks end with the parameters of a run in which
// nothing was cancelled, over the test group and over the runtime
// (negotiation, fusion, grouped allreduce, compression).
func TestCancelledStepRetried(t *testing.T) {
	const steps, cut = 6, 2
	colls := []struct {
		name string
		opts []DistOption
		make func(t *testing.T) []Collectives
	}{
		{"group", nil, func(t *testing.T) []Collectives {
			g := newGroup(2)
			return []Collectives{member{g, 0}, member{g, 1}}
		}},
		{"runtime", nil, runtimeColls},
		{"runtime/groups+fp16", []DistOption{NumGroups(1), WithCompression(FP16)}, runtimeColls},
	}
	for _, c := range colls {
		t.Run(c.name, func(t *testing.T) {
			run := func(t *testing.T, kind retryKind) [2][]float64 {
				cs := c.make(t)
				release := make(chan struct{})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				var out [2][]float64
				onRanks(t, 2, func(rank int) error {
					p, err := cancelRun(ctx, cs[rank], rank, 2, steps, cut, release, kind, c.opts...)
					if err != nil {
						cancel() // the other rank stops waiting for this one
					}
					out[rank] = p
					return err
				})
				return out
			}
			want := run(t, retryNoCancelling)
			if !slices.Equal(want[0], want[1]) {
				t.Fatalf("uncancelled run: the ranks disagree: %v and %v", want[0], want[1])
			}
			for _, kind := range []retryKind{retryStepContext, retryStep, retrySynchronize} {
				t.Run(kind.String(), func(t *testing.T) {
					got := run(t, kind)
					for rank, p := range got {
						if !slices.Equal(p, want[0]) {
							t.Errorf("rank %d: parameters %v, uncancelled run %v", rank, p, want[0])
						}
					}
				})
			}
		})
	}
}

func runtimeColls(t *testing.T) []Collectives {
	rts := startRuntimes(t, 2)
	cs := make([]Collectives, len(rts))
	for i, r := range rts {
		c, err := FromRuntime(r)
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	return cs
}

// TestCancelledSynchronizeThenShutdown: a step that cannot finish (rank 1
// never takes part) is cancelled; shutting the runtime down fails its
// reductions, so the next Synchronize returns that failure at once and ends
// the step, after which ZeroGrad works again.
func TestCancelledSynchronizeThenShutdown(t *testing.T) {
	rts := startRuntimes(t, 2)
	coll, err := FromRuntime(rts[0])
	if err != nil {
		t.Fatal(err)
	}
	m := newLinear(3, 1)
	inner, _ := NewSGD(m.params, SGDConfig{LR: 0.1})
	opt, err := NewDistributed(inner, coll)
	if err != nil {
		t.Fatal(err)
	}
	if err := opt.Ready(m.params[1]); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := opt.Synchronize(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Synchronize without rank 1 = %v, want a deadline error", err)
	}
	if err := opt.ZeroGrad(); !errors.Is(err, ErrInFlight) {
		t.Fatalf("ZeroGrad after the cancelled Synchronize = %v, want ErrInFlight", err)
	}
	if err := hvd.StopLocal(rts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	if err := opt.Synchronize(ctx); !errors.Is(err, hvd.ErrShutdown) {
		t.Fatalf("Synchronize after shutdown = %v, want ErrShutdown", err)
	}
	if err := opt.ZeroGrad(); err != nil {
		t.Fatalf("ZeroGrad once the failed step has ended = %v", err)
	}
	if err := opt.Step(); !errors.Is(err, hvd.ErrShutdown) {
		t.Fatalf("Step after shutdown = %v, want ErrShutdown", err)
	}
}

// TestStartFailureFailsStep: a reduction that could not be started in
// Ready is the step's failure even if the collectives work again by Step
// (the gradient was never reduced), and the next step starts afresh.
func TestStartFailureFailsStep(t *testing.T) {
	m := newLinear(2, 1)
	inner, _ := NewSGD(m.params, SGDConfig{LR: 0.1})
	g := newGroup(1)
	opt, err := NewDistributed(inner, member{g, 0})
	if err != nil {
		t.Fatal(err)
	}
	g.fail = errors.New("transport down")
	if err := opt.Ready(m.params[0]); !errors.Is(err, g.fail) {
		t.Fatalf("Ready with failing collectives = %v", err)
	}
	g.fail = nil
	before := slices.Clone(m.w)
	if err := opt.Step(); err == nil || !strings.Contains(err.Error(), "transport down") {
		t.Fatalf("Step after a reduction failed to start = %v, want that failure", err)
	}
	if !slices.Equal(m.w, before) {
		t.Fatal("the failed step changed the parameters")
	}
	if err := opt.ZeroGrad(); err != nil {
		t.Fatalf("ZeroGrad after the failed step: %v", err)
	}
	if err := opt.Ready(m.params[0]); err != nil {
		t.Fatalf("Ready in the next step: %v", err)
	}
	if err := opt.Step(); err != nil {
		t.Fatalf("the next step: %v", err)
	}
}
