package optim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/tensor"
)

// The decentralized tests train the linear model of distributed_test.go
// with plain SGD, each rank from its own initial weights (seeded by rank:
// no broadcast, so that every averaging shows) on its share of each
// global batch, and compare every rank's weights after every step with a
// single-process reference written from the formulas.
const decD, decBatch, decLR = 5, 24, 0.1

// decShard returns rank's rows of step s's global batch among n ranks.
func decShard(s, rank, n int) ([]float64, []float64) {
	xs, ys := linearBatch(s, decD, decBatch)
	per := decBatch / n
	return xs[rank*per*decD : (rank+1)*per*decD], ys[rank*per : (rank+1)*per]
}

// linearGrad returns the gradient of the linear model's loss at x (the
// weights, then the bias) on rows xs, from the formula.
func linearGrad(x, xs, ys []float64) []float64 {
	d, n := len(x)-1, len(ys)
	g := make([]float64, d+1)
	for i := range n {
		row := xs[i*d : (i+1)*d]
		r := x[d] - ys[i]
		for j := range row {
			r += x[j] * row[j]
		}
		g[d] += r / float64(n)
		for j := range row {
			g[j] += r * row[j] / float64(n)
		}
	}
	return g
}

// decInit returns rank's initial weights and bias, as newLinear makes them.
func decInit(rank int) []float64 {
	m := newLinear(decD, uint64(rank)+1)
	return append(slices.Clone(m.w), m.b...)
}

// decentralizedReference simulates n ranks of decentralized SGD in one
// goroutine: before steps 0, k, 2k, ... (k = interval) each rank's
// weights become the mean of all ranks' (PeerAll) or of its own and its
// ShiftOnePeer's at the c-th communication; then x -= lr·g(x before the
// averaging). nodeOf, if not nil, makes the averaging hierarchical: the
// mean within each node, then the nodes' means mixed among the nodes as
// the ranks are without it. It returns every rank's weights after every
// step.
func decentralizedReference(n, steps, interval int, mode PeerSelection, nodeOf []int) [][][]float64 {
	x := make([][]float64, n)
	for r := range x {
		x[r] = decInit(r)
	}
	out := make([][][]float64, n)
	comms := 0
	for s := range steps {
		g := make([][]float64, n)
		for r := range n {
			xs, ys := decShard(s, r, n)
			g[r] = linearGrad(x[r], xs, ys)
		}
		if s%interval == 0 {
			x = mixReference(x, mode, comms, nodeOf)
			comms++
		}
		for r := range n {
			for j := range x[r] {
				x[r][j] -= decLR * g[r][j]
			}
			out[r] = append(out[r], slices.Clone(x[r]))
		}
	}
	return out
}

// mixReference returns the ranks' weights after one averaging.
func mixReference(x [][]float64, mode PeerSelection, c int, nodeOf []int) [][]float64 {
	if nodeOf != nil {
		nodes := slices.Max(nodeOf) + 1
		means := make([][]float64, nodes)
		for k := range nodes {
			var members [][]float64
			for r, nd := range nodeOf {
				if nd == k {
					members = append(members, x[r])
				}
			}
			means[k] = meanOf(members)
		}
		mixed := mixReference(means, mode, c, nil)
		out := make([][]float64, len(x))
		for r, nd := range nodeOf {
			out[r] = slices.Clone(mixed[nd])
		}
		return out
	}
	out := make([][]float64, len(x))
	for r := range x {
		if mode == PeerAll {
			out[r] = meanOf(x)
			continue
		}
		p := ShiftOnePeer(r, len(x), c)
		out[r] = make([]float64, len(x[r]))
		for j := range x[r] {
			out[r][j] = (x[r][j] + x[p][j]) * 0.5
		}
	}
	return out
}

func meanOf(xs [][]float64) []float64 {
	m := make([]float64, len(xs[0]))
	for _, x := range xs {
		for j := range m {
			m[j] += x[j]
		}
	}
	for j := range m {
		m[j] /= float64(len(xs))
	}
	return m
}

// decentralizedRun trains rank's replica with Decentralized over coll and
// returns its weights after every step.
func decentralizedRun(ctx context.Context, coll Collectives, rank, n, steps int, cfg DecentralizedConfig) ([][]float64, error) {
	m := newLinear(decD, uint64(rank)+1)
	inner, err := NewSGD(m.params, SGDConfig{LR: decLR})
	if err != nil {
		return nil, err
	}
	ec, ok := coll.(ExchangeCollectives)
	if !ok {
		return nil, errors.New("the collectives cannot exchange")
	}
	dec, err := NewDecentralized(inner, ec, cfg)
	if err != nil {
		return nil, err
	}
	var out [][]float64
	for s := range steps {
		if err := dec.Start(); err != nil { // before the forward pass
			return nil, err
		}
		communicates := dec.Communicates()
		if err := linearStep(ctx, m, dec, s, rank, n); err != nil {
			return nil, err
		}
		if want := decBytes(cfg); communicates && dec.BytesSent() != want {
			return nil, fmt.Errorf("step %d: %d bytes sent, want %d", s, dec.BytesSent(), want)
		}
		out = append(out, append(slices.Clone(m.w), m.b...))
	}
	return out, nil
}

// decBytes is what BytesSent reports after a step of the linear model
// (decD+1 float64s): the weights once per collective of the last
// communication, twice on a node leader of a hierarchy.
func decBytes(cfg DecentralizedConfig) int {
	w := 8 * (decD + 1)
	if h := cfg.Hierarchy; h != nil && h.Leaders != nil {
		return 2 * w
	}
	return w
}

// linearStep is one step of the weight algorithms' tests: opt's
// ZeroGrad, the backward pass of the linear model on rank's share of step
// s's batch, opt's StepContext.
func linearStep(ctx context.Context, m *linear, opt interface {
	ZeroGrad() error
	StepContext(context.Context) error
}, s, rank, n int) error {
	if err := opt.ZeroGrad(); err != nil {
		return err
	}
	xs, ys := decShard(s, rank, n)
	if err := m.backward(xs, ys, noReady); err != nil {
		return err
	}
	if err := opt.StepContext(ctx); err != nil {
		return fmt.Errorf("step %d: %w", s, err)
	}
	return nil
}

// oneRank returns the collectives of a job of one and a plain SGD over a
// linear model, for the tests of settings refused at construction.
func oneRank(t *testing.T) (ExchangeCollectives, Optimizer) {
	t.Helper()
	rts := startRuntimes(t, 1)
	coll, err := FromRuntime(rts[0])
	if err != nil {
		t.Fatal(err)
	}
	inner, err := NewSGD(newLinear(2, 1).params, SGDConfig{LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	return coll.(ExchangeCollectives), inner
}

// checkAgainst compares one rank's weights after every step with the
// reference's.
func checkAgainst(got, want [][]float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d steps, want %d", len(got), len(want))
	}
	for s := range want {
		if err := closeTo(got[s], want[s], 1e-12); err != nil {
			return fmt.Errorf("after step %d: %w", s, err)
		}
	}
	return nil
}

func TestShiftOnePeer(t *testing.T) {
	// Bagua's pairs at 4 ranks: (0,2) (1,3), then (0,3) (1,2), then again.
	want := [][]int{{2, 3, 0, 1}, {3, 2, 1, 0}, {2, 3, 0, 1}}
	for s, w := range want {
		for r := range 4 {
			if p := ShiftOnePeer(r, 4, s); p != w[r] {
				t.Errorf("s=%d rank %d: peer %d, want %d", s, r, p, w[r])
			}
		}
	}
	// At every size and communication the peers pair up, across the halves.
	for _, n := range []int{2, 4, 6, 8} {
		for s := range 2 * n {
			for r := range n {
				p := ShiftOnePeer(r, n, s)
				if p < 0 || p >= n || ShiftOnePeer(p, n, s) != r || (r < n/2) == (p < n/2) {
					t.Fatalf("n=%d s=%d: rank %d pairs with %d, which pairs with %d", n, s, r, p, ShiftOnePeer(p, n, s))
				}
			}
		}
	}
}

func TestDecentralizedMatchesReference(t *testing.T) {
	const steps = 12
	for _, n := range []int{2, 4} {
		rts := startRuntimes(t, n)
		for _, mode := range []PeerSelection{PeerAll, PeerShiftOne} {
			for _, k := range []int{1, 2} {
				t.Run(fmt.Sprintf("np%d/%v/interval%d", n, mode, k), func(t *testing.T) {
					want := decentralizedReference(n, steps, k, mode, nil)
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					onRanks(t, n, func(rank int) error {
						coll, err := FromRuntime(rts[rank])
						if err != nil {
							return err
						}
						got, err := decentralizedRun(ctx, coll, rank, n, steps, DecentralizedConfig{PeerSelection: mode, CommunicationInterval: k})
						if err != nil {
							return err
						}
						return checkAgainst(got, want[rank])
					})
				})
			}
		}
	}
}

// TestDecentralizedHierarchical: the node average, the leaders' mixing and
// the broadcast in the node match the reference, on 2 and 4 nodes of two
// ranks and on nodes of one and two ranks.
func TestDecentralizedHierarchical(t *testing.T) {
	const steps = 10
	for _, nodeOf := range [][]int{{0, 0, 1, 1}, {0, 0, 1, 1, 2, 2, 3, 3}, {0, 1, 1, 2}} {
		n := len(nodeOf)
		rts := startNodes(t, nodeOf)
		hs := make([]*Hierarchy, n)
		onRanks(t, n, func(rank int) error {
			var err error
			hs[rank], err = NewHierarchy(context.Background(), rts[rank])
			return err
		})
		for _, mode := range []PeerSelection{PeerAll, PeerShiftOne} {
			if mode == PeerShiftOne && hs[0].Nodes%2 != 0 {
				continue
			}
			t.Run(fmt.Sprintf("nodes%v/%v", nodeOf, mode), func(t *testing.T) {
				want := decentralizedReference(n, steps, 1, mode, nodeOf)
				onRanks(t, n, func(rank int) error {
					coll, err := FromRuntime(rts[rank])
					if err != nil {
						return err
					}
					got, err := decentralizedRun(context.Background(), coll, rank, n, steps,
						DecentralizedConfig{PeerSelection: mode, CommunicationInterval: 1, Hierarchy: hs[rank]})
					if err != nil {
						return err
					}
					return checkAgainst(got, want[rank])
				})
			})
		}
		onRanks(t, n, func(rank int) error {
			ps := len(rts[rank].ProcessSets())
			if err := hs[rank].Close(context.Background()); err != nil {
				return err
			}
			if got := len(rts[rank].ProcessSets()); got != ps-1 {
				return fmt.Errorf("%d process sets after Close, %d before; want the leaders' removed", got, ps)
			}
			return nil
		})
	}
}

// TestDecentralizedBadSettings: settings that cannot work fail on every
// rank at construction, before any communication.
func TestDecentralizedBadSettings(t *testing.T) {
	rts := startRuntimes(t, 3)
	for _, c := range []struct {
		name string
		cfg  DecentralizedConfig
		want string
	}{
		{"shift-one-odd", DecentralizedConfig{PeerSelection: PeerShiftOne, CommunicationInterval: 1}, "even number of ranks, not 3"},
		{"interval-0", DecentralizedConfig{CommunicationInterval: 0}, "communication interval 0 must be >= 1"},
		{"unknown-mode", DecentralizedConfig{PeerSelection: 7, CommunicationInterval: 1}, "unknown peer selection"},
		{"shift-one-odd-nodes", DecentralizedConfig{PeerSelection: PeerShiftOne, CommunicationInterval: 1,
			Hierarchy: &Hierarchy{Node: fakeSize(1), Nodes: 3}}, "even number of nodes, not 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			onRanks(t, 3, func(rank int) error {
				coll, err := FromRuntime(rts[rank])
				if err != nil {
					return err
				}
				_, err = decentralizedRun(context.Background(), coll, rank, 3, 1, c.cfg)
				if !errors.Is(err, ErrDecentralized) || !strings.Contains(fmt.Sprint(err), c.want) {
					return fmt.Errorf("%v, want ErrDecentralized saying %q", err, c.want)
				}
				return nil
			})
		})
	}
	// No communication happened: the runtimes' requests count is zero.
	for r, rt := range rts {
		if n := rt.Stats().Requests; n != 0 {
			t.Errorf("rank %d: %d requests after the refused settings", r, n)
		}
	}
}

// TestDecentralizedMixedDTypes: parameters of different dtypes are refused.
func TestDecentralizedMixedDTypes(t *testing.T) {
	coll, _ := oneRank(t)
	m := newLinear(2, 1)
	ps := []Param{m.params[0], {Name: "f32", Value: tensor.New(tensor.Float32, 2), Grad: tensor.New(tensor.Float32, 2)}}
	inner, err := NewSGD(ps, SGDConfig{LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewDecentralized(inner, coll, DecentralizedConfig{CommunicationInterval: 1}); !errors.Is(err, ErrDecentralized) {
		t.Fatalf("mixed dtypes: %v, want ErrDecentralized", err)
	}
}

// TestExchangeSizes: the runtime adapter's exchange fills the receive
// buffer, refuses one of another dtype at once, and fails the wait of a
// rank whose buffer does not hold what its source sent.
func TestExchangeSizes(t *testing.T) {
	rts := startRuntimes(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	onRanks(t, 2, func(rank int) error {
		coll, err := FromRuntime(rts[rank])
		if err != nil {
			return err
		}
		ec := coll.(ExchangeCollectives)
		p := 1 - rank
		out := tensor.New(tensor.Float64, 3)
		w, err := ec.ExchangeAsync(tensor.FromFloat64([]float64{float64(rank), 1, 2}), out, p, p, "sizes.ok")
		if err == nil {
			err = w.Wait(ctx)
		}
		if err != nil || out.Float64s()[0] != float64(p) {
			return fmt.Errorf("exchange: %v %v", out.Float64s(), err)
		}
		if _, err := ec.ExchangeAsync(tensor.New(tensor.Float64, 2), tensor.New(tensor.Float32, 2), p, p, "sizes.dtype"); err == nil {
			return errors.New("a float32 receive buffer for float64 data was accepted")
		}
		short := tensor.New(tensor.Float64, 2+rank) // rank 1 expects one element more than rank 0 sends
		w, err = ec.ExchangeAsync(tensor.New(tensor.Float64, 2), short, p, p, "sizes.short")
		if err == nil {
			err = w.Wait(ctx)
		}
		if (rank == 1) != (err != nil) {
			return fmt.Errorf("receive buffer of %d for 2 elements: %v", short.Len(), err)
		}
		return nil
	})
}
