package optim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/gohorovod/gohorovod/tensor"
)

// The in-memory group is also a GroupCollectives, a GatherCollectives and
// a Ranker; plain hides all that.
var (
	_ GroupCollectives  = member{}
	_ GatherCollectives = member{}
	_ Ranker            = member{}
)

// plain is a Collectives and nothing more.
type plain struct{ Collectives }

func (m member) Rank() int { return m.rank }

// groupCalls records the grouped allreduces started per rank: name and
// member count.
var groupCalls = struct {
	sync.Mutex
	log map[*group][]string
}{log: map[*group][]string{}}

func (m member) GroupedAllreduceAsync(ts []*tensor.Tensor, name string, op tensor.ReduceOp, pre, post float64) (Waiter, error) {
	if m.rank == 0 {
		groupCalls.Lock()
		groupCalls.log[m.g] = append(groupCalls.log[m.g], name)
		groupCalls.Unlock()
	}
	var ws multiWaiter
	for i, t := range ts {
		w, err := m.AllreduceAsync(t, name+"."+string(rune('a'+i)), op, pre, post)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	return ws, nil
}

type multiWaiter []Waiter

func (ws multiWaiter) Wait(ctx context.Context) error {
	for _, w := range ws {
		if err := w.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

var gathered = struct {
	sync.Mutex
	out map[string][]byte
}{out: map[string][]byte{}}

func (m member) Allgather(ctx context.Context, t *tensor.Tensor, name string) (*tensor.Tensor, error) {
	key := "allgather." + name
	h, err := m.start(t, key, func(ts []*tensor.Tensor) {
		var all []byte
		for _, x := range ts {
			all = append(all, x.Bytes()...)
		}
		gathered.Lock()
		gathered.out[key] = all
		gathered.Unlock()
	})
	if err != nil {
		return nil, err
	}
	if err := h.Wait(ctx); err != nil {
		return nil, err
	}
	gathered.Lock()
	all := gathered.out[key]
	gathered.Unlock()
	shape := t.Shape().Clone()
	shape[0] = len(all) / t.DType().Size() / max(1, t.RowSize())
	return tensor.FromBytes(t.DType(), slices.Clone(all), shape...)
}

// TestCompression: gradients travel as half-precision values (the
// collective sees the half dtype) and come back rounded as the half type
// rounds them: 1+2⁻¹² survives float32 but not fp16, 1+2⁻⁹ survives fp16
// but not bf16, 1e5 overflows fp16 but not bf16.
func TestCompression(t *testing.T) {
	cases := []struct {
		comp   Compression
		wire   tensor.DType // for compressed cases
		in     []float64
		want32 []float32 // the float32 parameter's reduced gradient
	}{
		{NoCompression, 0, []float64{1 + 0x1p-12, 1 + 0x1p-9, 1e5}, []float32{1 + 0x1p-12, 1 + 0x1p-9, 1e5}},
		{FP16, tensor.Float16, []float64{1 + 0x1p-12, 1 + 0x1p-9, 1e5}, []float32{1, 1 + 0x1p-9, float32(math.Inf(1))}},
		{BF16, tensor.BFloat16, []float64{1 + 0x1p-12, 1 + 0x1p-9, 1e5}, []float32{1, 1, 99840}},
	}
	for _, c := range cases {
		t.Run(c.comp.String(), func(t *testing.T) {
			g := newGroup(2)
			got := make([][]Param, 2)
			onRanks(t, 2, func(rank int) error {
				ps := []Param{
					{Name: "f32", Value: tensor.New(tensor.Float32, 3), Grad: tensor.New(tensor.Float32, 3)},
					{Name: "f64", Value: tensor.New(tensor.Float64, 3), Grad: tensor.New(tensor.Float64, 3)},
				}
				inner, err := NewSGD(ps, SGDConfig{LR: 0.1})
				if err != nil {
					return err
				}
				opt, err := NewDistributed(inner, member{g, rank}, WithCompression(c.comp))
				if err != nil {
					return err
				}
				for _, p := range ps {
					setFloat64s(p.Grad, c.in)
					if err := opt.Ready(p); err != nil {
						return err
					}
				}
				got[rank] = ps
				return opt.Synchronize(context.Background())
			})
			for name, own := range map[string]tensor.DType{"f32": tensor.Float32, "f64": tensor.Float64} {
				want := c.wire
				if c.comp == NoCompression {
					want = own
				}
				if dt := g.dtypes[name]; dt != want {
					t.Errorf("%s travelled as %v, want %v", name, dt, want)
				}
			}
			for rank, ps := range got {
				f32 := ps[0].Grad.Float32s()
				f64 := ps[1].Grad.Float64s()
				for i, w := range c.want32 {
					if f32[i] != w {
						t.Errorf("rank %d: float32 gradient %d = %v, want %v", rank, i, f32[i], w)
					}
					want64 := float64(w)
					if c.comp == NoCompression {
						want64 = c.in[i]
					}
					if f64[i] != want64 {
						t.Errorf("rank %d: float64 gradient %d = %v, want %v", rank, i, f64[i], want64)
					}
				}
			}
		})
	}
}

// TestCompressionTrains: the equivalence run with fp16 and bf16 gradients
// lands near the uncompressed result (the rounding is small but not zero).
func TestCompressionTrains(t *testing.T) {
	const steps, size = 40, 2
	want, err := equivalenceRun(context.Background(), nil, 0, 1, steps)
	if err != nil {
		t.Fatal(err)
	}
	for _, comp := range []Compression{FP16, BF16} {
		g := newGroup(size)
		res := make([][]float64, size)
		onRanks(t, size, func(rank int) error {
			var err error
			res[rank], err = equivalenceRunWith(context.Background(), member{g, rank}, rank, size, steps, WithCompression(comp))
			return err
		})
		if err := closeTo(res[0], want, 0.05); err != nil {
			t.Errorf("%v: %v", comp, err)
		}
		if err := closeTo(res[0], want, 1e-9); err == nil {
			t.Errorf("%v: matches uncompressed training to 1e-9: no rounding happened", comp)
		}
		if !slices.Equal(res[0], res[1]) {
			t.Errorf("%v: ranks differ", comp)
		}
	}
}

// fourParams are four float64 parameters p0..p3 of two values each.
func fourParams() []Param {
	ps := make([]Param, 4)
	for i := range ps {
		ps[i] = Param{Name: "p" + string(rune('0'+i)), Value: tensor.New(tensor.Float64, 2), Grad: tensor.New(tensor.Float64, 2)}
	}
	return ps
}

// TestGroups: a group's allreduce starts only when its last member is
// ready, as one grouped allreduce (or, on a plain Collectives, as its
// members' allreduces), and the results are those of ungrouped reduction.
func TestGroups(t *testing.T) {
	cases := []struct {
		name       string
		opt        DistOption
		plain      bool
		wantGroups []string // grouped calls on rank 0
		// lastOfGroup[i]: reporting p_i completes a group or a singleton
		// (a reduction starts); reports go p3, p2, p1, p0.
		starts []bool
	}{
		{"explicit", Groups([]string{"p3", "p1"}), false, []string{"group.p3"}, []bool{true, true, true, false}},
		{"num groups", NumGroups(2), false, []string{"group.p0", "group.p2"}, []bool{true, false, true, false}},
		{"plain collectives", Groups([]string{"p0", "p1", "p2", "p3"}), true, nil, []bool{true, false, false, false}},
		{"more groups than params", NumGroups(9), false, nil, []bool{true, true, true, true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newGroup(2)
			res := make([][]float64, 2)
			onRanks(t, 2, func(rank int) error {
				ps := fourParams()
				inner, err := NewSGD(ps, SGDConfig{LR: 1})
				if err != nil {
					return err
				}
				var coll Collectives = member{g, rank}
				if c.plain {
					coll = plain{coll}
				}
				opt, err := NewDistributed(inner, coll, c.opt)
				if err != nil {
					return err
				}
				for i := 3; i >= 0; i-- {
					setFloat64s(ps[i].Grad, []float64{float64(10*i + rank), float64(rank)})
					if err := opt.Ready(ps[i]); err != nil {
						return err
					}
					opt.mu.Lock()
					started := opt.handles[opt.unit[i]] != nil
					opt.mu.Unlock()
					if started != c.starts[i] {
						t.Errorf("rank %d: after p%d, reduction started %v, want %v", rank, i, started, c.starts[i])
					}
				}
				if err := opt.Step(); err != nil {
					return err
				}
				for _, p := range ps {
					res[rank] = append(res[rank], p.Value.Float64s()...)
				}
				return nil
			})
			want := []float64{-0.5, -0.5, -10.5, -0.5, -20.5, -0.5, -30.5, -0.5}
			for rank := range res {
				if !slices.Equal(res[rank], want) {
					t.Errorf("rank %d: parameters %v, want %v", rank, res[rank], want)
				}
			}
			groupCalls.Lock()
			got := groupCalls.log[g]
			groupCalls.Unlock()
			slices.Sort(got)
			if !slices.Equal(got, c.wantGroups) {
				t.Errorf("grouped allreduces %q, want %q", got, c.wantGroups)
			}
		})
	}
}

// TestGroupUnreported: a group with a member never reported is still
// reduced at Step, the member with its current value (Ready only starts
// reductions early), so ranks do not wait forever and nothing is lost.
func TestGroupUnreported(t *testing.T) {
	g := newGroup(2)
	onRanks(t, 2, func(rank int) error {
		ps := fourParams()
		inner, _ := NewSGD(ps, SGDConfig{LR: 1})
		opt, err := NewDistributed(inner, member{g, rank}, Groups([]string{"p0", "p1"}))
		if err != nil {
			return err
		}
		setFloat64s(ps[1].Grad, []float64{7, 7}) // never reported: reduced as it is
		if rank == 0 {
			setFloat64s(ps[0].Grad, []float64{2, 2})
			if err := opt.Ready(ps[0]); err != nil {
				return err
			}
		}
		if err := opt.Step(); err != nil {
			return err
		}
		if v := ps[0].Value.Float64s(); v[0] != -1 {
			return fmt.Errorf("p0 = %v, want -1: rank 0's 2 averaged with rank 1's unreported 0", v)
		}
		if v := ps[1].Value.Float64s(); v[0] != -7 {
			return fmt.Errorf("unreported p1 = %v, want -7: its gradient 7 reduced as it is", v)
		}
		return nil
	})
}

// TestMisuseOptions: bad option combinations and parameter sets are
// refused at construction, and zeroing while a group is in flight fails.
func TestMisuseOptions(t *testing.T) {
	g := newGroup(1)
	bad := []struct {
		name   string
		params []Param
		opts   []DistOption
		is     error
	}{
		{"unknown group member", nil, []DistOption{Groups([]string{"p0", "zz"})}, ErrGroups},
		{"member in two groups", nil, []DistOption{Groups([]string{"p0"}, []string{"p1", "p0"})}, ErrGroups},
		{"member twice", nil, []DistOption{Groups([]string{"p2", "p2"})}, ErrGroups},
		{"empty group", nil, []DistOption{Groups([]string{})}, ErrGroups},
		{"negative groups", nil, []DistOption{NumGroups(-1)}, ErrGroups},
		{"compression", nil, []DistOption{WithCompression(Compression(7))}, nil},
		{"adasum with fp16", nil, []DistOption{WithOp(Adasum), WithCompression(FP16)}, nil},
		{"adasum with predivide", nil, []DistOption{WithOp(Adasum), GradientPredivideFactor(2)}, nil},
		{"duplicate names", []Param{fourParams()[0], fourParams()[0]}, nil, ErrParams},
		{"missing name", []Param{{Value: tensor.New(tensor.Float64, 1), Grad: tensor.New(tensor.Float64, 1)}}, nil, ErrParams},
	}
	for _, c := range bad {
		ps := c.params
		if ps == nil {
			ps = fourParams()
		}
		inner := &fakeOpt{params: ps}
		_, err := NewDistributed(inner, member{g, 0}, c.opts...)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
		} else if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("%s: %v, want %v", c.name, err, c.is)
		}
	}

	ps := fourParams()
	inner, _ := NewSGD(ps, SGDConfig{LR: 1})
	opt, err := NewDistributed(inner, member{g, 0}, NumGroups(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if err := opt.Ready(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := opt.ZeroGrad(); !errors.Is(err, ErrInFlight) {
		t.Fatalf("ZeroGrad with a group in flight: %v", err)
	}
	if err := opt.Ready(ps[2]); !errors.Is(err, ErrTooManyPasses) {
		t.Fatalf("grouped gradient reported twice: %v", err)
	}
	if err := opt.Step(); err != nil {
		t.Fatal(err)
	}
	if err := opt.ZeroGrad(); err != nil {
		t.Fatal(err)
	}

	// Reported but not yet reduced: a group waiting for a member, or a
	// gradient waiting for its second pass.
	pending := []struct {
		name string
		opt  DistOption
	}{
		{"group waiting", Groups([]string{"p0", "p1"})},
		{"passes accumulating", BackwardPassesPerStep(2)},
	}
	for _, c := range pending {
		ps := fourParams()
		inner, _ := NewSGD(ps, SGDConfig{LR: 1})
		opt, err := NewDistributed(inner, member{g, 0}, c.opt)
		if err != nil {
			t.Fatal(err)
		}
		if err := opt.Ready(ps[0]); err != nil {
			t.Fatal(err)
		}
		if err := opt.ZeroGrad(); !errors.Is(err, ErrInFlight) {
			t.Errorf("%s: ZeroGrad: %v", c.name, err)
		}
		if err := opt.Step(); err != nil {
			t.Fatal(err)
		}
		if err := opt.ZeroGrad(); err != nil {
			t.Errorf("%s: ZeroGrad after Step: %v", c.name, err)
		}
	}
}

// fakeOpt is an Optimizer that holds parameters and does nothing (so that
// NewDistributed's own checks are what is tested).
type fakeOpt struct{ params []Param }

func (f *fakeOpt) Params() []Param       { return f.params }
func (f *fakeOpt) Step() error           { return nil }
func (f *fakeOpt) ZeroGrad() error       { return nil }
func (f *fakeOpt) LR() float64           { return 0 }
func (f *fakeOpt) SetLR(float64)         {}
func (f *fakeOpt) State() *State         { return &State{} }
func (f *fakeOpt) SetState(*State) error { return nil }
