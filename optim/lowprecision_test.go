package optim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// lowPrecisionReference simulates n ranks of low-precision decentralized
// SGD on the linear model of decentralized_test.go, in one goroutine,
// from the formulas: replicas s (own), l and r (neighbours') set from the
// initial weights; at steps 0, k, 2k, ... h = (x+l+r)/3 − lr·g(x), z =
// h − s quantized per parameter (the weights, then the bias), s += ẑ,
// x = s, and each neighbour's replica of this rank += ẑ; at the other
// steps x −= lr·g(x). It returns every rank's weights after every step.
func lowPrecisionReference(t *testing.T, n, steps, interval int) [][][]float64 {
	x, s, l, r := make([][]float64, n), make([][]float64, n), make([][]float64, n), make([][]float64, n)
	for i := range n {
		x[i] = decInit(i)
	}
	for i := range n {
		s[i], l[i], r[i] = slices.Clone(x[i]), slices.Clone(x[(i+n-1)%n]), slices.Clone(x[(i+1)%n])
	}
	out := make([][][]float64, n)
	for step := range steps {
		g := make([][]float64, n)
		for i := range n {
			xs, ys := decShard(step, i, n)
			g[i] = linearGrad(x[i], xs, ys)
		}
		if step%interval != 0 {
			for i := range n {
				for j := range x[i] {
					x[i][j] -= decLR * g[i][j]
				}
			}
		} else {
			zhat := make([][]float64, n)
			for i := range n {
				z := make([]float32, len(x[i]))
				for j := range x[i] {
					z[j] = float32((x[i][j]+l[i][j]+r[i][j])/3 - decLR*g[i][j] - s[i][j])
				}
				zhat[i] = quantizedBack(t, z, decD) // the weights, then the bias
			}
			for i := range n {
				for j := range x[i] {
					s[i][j] += zhat[i][j]
					l[i][j] += zhat[(i+n-1)%n][j]
					r[i][j] += zhat[(i+1)%n][j]
				}
				x[i] = slices.Clone(s[i])
			}
		}
		for i := range n {
			out[i] = append(out[i], slices.Clone(x[i]))
		}
	}
	return out
}

// quantizedBack quantizes z in two chunks, z[:cut] and z[cut:], and
// returns what dequantizing gives.
func quantizedBack(t *testing.T, z []float32, cut int) []float64 {
	out := make([]float64, len(z))
	for _, c := range [][2]int{{0, cut}, {cut, len(z)}} {
		q := make([]byte, c[1]-c[0])
		lo, hi, err := QuantizeMinMaxUint8(z[c[0]:c[1]], q)
		if err != nil {
			t.Fatal(err)
		}
		back := make([]float32, len(q))
		DequantizeMinMaxUint8(q, lo, hi, back)
		for j, v := range back {
			out[c[0]+j] = float64(v)
		}
	}
	return out
}

// lowPrecisionStep is one rank's state after a step: its weights and its
// replicas of its neighbours'.
type lowPrecisionStep struct{ x, left, right []float64 }

// newLowPrecision returns rank's linear model (seeded by rank) and a
// LowPrecisionDecentralized over plain SGD on it.
func newLowPrecision(coll Collectives, rank, interval int) (*linear, *LowPrecisionDecentralized, error) {
	m := newLinear(decD, uint64(rank)+1)
	inner, err := NewSGD(m.params, SGDConfig{LR: decLR})
	if err != nil {
		return nil, nil, err
	}
	lp, err := NewLowPrecisionDecentralized(inner, coll.(ExchangeCollectives), LowPrecisionConfig{CommunicationInterval: interval})
	return m, lp, err
}

// lowPrecisionRun trains rank's replica with LowPrecisionDecentralized
// over coll and returns its state after every step.
func lowPrecisionRun(ctx context.Context, coll Collectives, rank, n, steps, interval int) ([]lowPrecisionStep, error) {
	m, lp, err := newLowPrecision(coll, rank, interval)
	if err != nil {
		return nil, err
	}
	var out []lowPrecisionStep
	for s := range steps {
		if err := linearStep(ctx, m, lp, s, rank, n); err != nil {
			return nil, err
		}
		if want := min(n-1, 2) * (decD + 1 + 16); s%interval == 0 && lp.BytesSent() != want {
			return nil, fmt.Errorf("step %d: %d bytes sent, want %d", s, lp.BytesSent(), want)
		}
		if err := lp.Wait(ctx); err != nil { // the replicas, for the invariants
			return nil, err
		}
		l, r := lp.Replicas()
		out = append(out, lowPrecisionStep{x: append(slices.Clone(m.w), m.b...), left: l.Float64s(), right: r.Float64s()})
	}
	return out, nil
}

// checkLowPrecision checks every rank's run: its weights match the
// reference within 1e-5, and after each communicating step they equal,
// bit for bit, its left neighbour's right replica and its right
// neighbour's left replica.
func checkLowPrecision(runs [][]lowPrecisionStep, want [][][]float64, interval int) error {
	n := len(runs)
	for i, run := range runs {
		for s, st := range run {
			if err := closeTo(st.x, want[i][s], 1e-5); err != nil {
				return fmt.Errorf("rank %d after step %d: %w", i, s, err)
			}
			if s%interval != 0 {
				continue
			}
			if l := runs[(i+n-1)%n][s].right; !slices.Equal(st.x, l) {
				return fmt.Errorf("rank %d after step %d: weights %v, but its left neighbour's replica is %v", i, s, st.x, l)
			}
			if r := runs[(i+1)%n][s].left; !slices.Equal(st.x, r) {
				return fmt.Errorf("rank %d after step %d: weights %v, but its right neighbour's replica is %v", i, s, st.x, r)
			}
		}
	}
	return nil
}

func TestLowPrecisionDecentralized(t *testing.T) {
	const steps = 12
	for _, n := range []int{1, 2, 3, 4} {
		rts := startRuntimes(t, n)
		for _, k := range []int{1, 2} {
			t.Run(fmt.Sprintf("np%d/interval%d", n, k), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				runs := make([][]lowPrecisionStep, n)
				onRanks(t, n, func(rank int) error {
					coll, err := FromRuntime(rts[rank])
					if err != nil {
						return err
					}
					runs[rank], err = lowPrecisionRun(ctx, coll, rank, n, steps, k)
					return err
				})
				if err := checkLowPrecision(runs, lowPrecisionReference(t, n, steps, k), k); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestLowPrecisionDiverged: a rank whose weights are not finite fails its
// step with the quantizer's error, its exchange still in flight; its
// neighbours' Wait fails naming it; nobody waits.
func TestLowPrecisionDiverged(t *testing.T) {
	const n = 3
	rts := startRuntimes(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	onRanks(t, n, func(rank int) error {
		coll, err := FromRuntime(rts[rank])
		if err != nil {
			return err
		}
		m, lp, err := newLowPrecision(coll, rank, 1)
		if err != nil {
			return err
		}
		if rank == 1 {
			m.params[0].Grad.Float64s()[2] = math.Inf(1)
		}
		err = lp.StepContext(ctx)
		if rank != 1 && err == nil {
			err = lp.Wait(ctx) // the neighbours learn it from the exchange
		}
		switch {
		case rank == 1 && !errors.Is(err, ErrNotFinite):
			return fmt.Errorf("diverged rank: %v, want the quantizer's error", err)
		case rank != 1 && (err == nil || !strings.Contains(err.Error(), "rank 1 sent no difference")):
			return fmt.Errorf("neighbour: %v, want an error naming rank 1", err)
		}
		return nil
	})
}

func TestLowPrecisionBadSettings(t *testing.T) {
	coll, inner := oneRank(t)
	if _, err := NewLowPrecisionDecentralized(inner, coll, LowPrecisionConfig{}); !errors.Is(err, ErrDecentralized) {
		t.Fatalf("interval 0: %v, want ErrDecentralized", err)
	}
}

// TestLowPrecisionSetState: after SetState (a restored checkpoint, here the
// state as it was), the next step sets the replicas again from the
// weights, so that they still equal the neighbours' weights.
func TestLowPrecisionSetState(t *testing.T) {
	const n, steps = 3, 6
	rts := startRuntimes(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	xs, lefts := make([][]float64, n), make([][]float64, n)
	onRanks(t, n, func(rank int) error {
		coll, err := FromRuntime(rts[rank])
		if err != nil {
			return err
		}
		m, lp, err := newLowPrecision(coll, rank, 1)
		if err != nil {
			return err
		}
		for s := range steps {
			if s == steps/2 {
				if err := lp.SetState(lp.State()); err != nil {
					return err
				}
			}
			if err := linearStep(ctx, m, lp, s, rank, n); err != nil {
				return err
			}
		}
		if err := lp.Wait(ctx); err != nil {
			return err
		}
		l, _ := lp.Replicas()
		xs[rank], lefts[rank] = append(slices.Clone(m.w), m.b...), l.Float64s()
		return nil
	})
	for r := range n {
		if left := (r + n - 1) % n; !slices.Equal(lefts[r], xs[left]) {
			t.Fatalf("rank %d's replica of rank %d: %v, its weights %v", r, left, lefts[r], xs[left])
		}
	}
}
