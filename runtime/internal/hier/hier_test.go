package hier

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/runtime/comm/fault"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/tensor"
)

// hangAfter is how long onRanks waits for the ranks before it calls the
// collectives hung.
const hangAfter = 60 * time.Second

// onRanks runs f on every member of a group, one goroutine per rank, and
// returns each rank's error (a panic counts as one). If the ranks have not
// all returned after hangAfter, the test fails at once: a collective hung.
func onRanks(t testing.TB, comms []comm.Communicator, f func(c comm.Communicator) error) []error {
	t.Helper()
	done := make(chan []error, 1)
	go func() { done <- commtest.OnRanks(comms, f) }()
	select {
	case errs := <-done:
		return errs
	case <-time.After(hangAfter):
		t.Fatalf("ranks still running after %v: a collective hung", hangAfter)
		return nil
	}
}

// report fails the test with every rank's error.
func report(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// mix is a small hash of a rank, an element index and a case number.
func mix(rank, i, seed int) uint64 {
	h := uint64(rank+1)*0x9e3779b97f4a7c15 ^ uint64(i+1)*0xbf58476d1ce4e5b9 ^ uint64(seed+1)*0x94d049bb133111eb
	h ^= h >> 31
	h *= 0xd6e8feb86659fd39
	return h ^ h>>29
}

// exact are the floating-point values fillExact draws from: every sum and
// every product of up to six of them, and every partial one, is exact in
// every float dtype except for the last product's rounding, which is the
// same in any order; so hierarchical and flat results agree bit for bit.
var exact = []float32{-2, -1, -0.5, 0, 0.5, 1, 2, 3}

// fillExact fills t with values for rank and case seed: for floats, values
// of exact; for integers, arbitrary bit patterns (sums and products wrap,
// the same in any order); for bools, 0 and 1.
func fillExact(t *tensor.Tensor, rank, seed int) {
	dt := t.DType()
	if dt.IsFloat() {
		vals := make([]float32, t.Len())
		for i := range vals {
			vals[i] = exact[mix(rank, i, seed)%uint64(len(exact))]
		}
		setFloats(t, vals)
		return
	}
	b, esz := t.Bytes(), dt.Size()
	for i := range t.Len() {
		h := mix(rank, i, seed)
		if dt == tensor.Bool {
			b[i] = byte(h & 1)
			continue
		}
		for j := range esz {
			b[i*esz+j] = byte(h >> (8 * j))
		}
	}
}

// setFloats stores vals, converted, into the float tensor t.
func setFloats(t *tensor.Tensor, vals []float32) {
	switch t.DType() {
	case tensor.Float32:
		copy(t.Float32s(), vals)
	case tensor.Float64:
		s := t.Float64s()
		for i, v := range vals {
			s[i] = float64(v)
		}
	case tensor.Float16:
		tensor.Float32ToFloat16(tensor.View[tensor.Float16Bits](t), vals)
	case tensor.BFloat16:
		tensor.Float32ToBFloat16(tensor.View[tensor.BFloat16Bits](t), vals)
	default:
		panic(fmt.Sprintf("setFloats on %v", t.DType()))
	}
}

// floats returns the float tensor t's values as float64s.
func floats(t *tensor.Tensor) []float64 {
	out := make([]float64, t.Len())
	switch t.DType() {
	case tensor.Float32:
		for i, v := range t.Float32s() {
			out[i] = float64(v)
		}
	case tensor.Float64:
		copy(out, t.Float64s())
	case tensor.Float16, tensor.BFloat16:
		tmp := make([]float32, t.Len())
		if t.DType() == tensor.Float16 {
			tensor.Float16ToFloat32(tmp, tensor.View[tensor.Float16Bits](t))
		} else {
			tensor.BFloat16ToFloat32(tmp, tensor.View[tensor.BFloat16Bits](t))
		}
		for i, v := range tmp {
			out[i] = float64(v)
		}
	}
	return out
}

// diff describes how got differs from want, byte for byte, or returns "".
func diff(got, want *tensor.Tensor) string {
	g, w := got.Bytes(), want.Bytes()
	if bytes.Equal(g, w) {
		return ""
	}
	esz, bad, first := got.DType().Size(), 0, -1
	for i := 0; i < len(g); i += esz {
		if !bytes.Equal(g[i:i+esz], w[i:i+esz]) {
			bad++
			if first < 0 {
				first = i / esz
			}
		}
	}
	return fmt.Sprintf("%d of %d elements differ, first element %d: bytes %x, want %x", bad, got.Len(), first, g[first*esz:(first+1)*esz], w[first*esz:(first+1)*esz])
}

func TestPieces(t *testing.T) {
	tests := []struct {
		n, parts int
		want     []int
	}{
		{0, 2, []int{0, 0}},
		{1, 2, []int{1, 0}},
		{3, 2, []int{2, 1}},
		{7, 3, []int{3, 2, 2}},
		{1001, 2, []int{501, 500}},
		{1001, 3, []int{334, 334, 333}},
		{1000, 3, []int{334, 333, 333}},
		{5, 1, []int{5}},
	}
	for _, tt := range tests {
		got := make([]int, tt.parts)
		pieces(got, tt.n)
		if !slices.Equal(got, tt.want) {
			t.Errorf("pieces(%d, %d) = %v, want %v", tt.n, tt.parts, got, tt.want)
		}
	}
}

// TestAllreduce compares the hierarchical allreduce with the group's flat
// one, bit for bit, on every layout of groups, for every dtype and every
// reduction it supports, on buffer sizes with and without remainders.
func TestAllreduce(t *testing.T) {
	sizes := []int{0, 1, 3, 7, 1000, 1001}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			report(t, onRanks(t, newGroup(g.opts), func(c comm.Communicator) error {
				h, err := Open(c)
				if err != nil {
					return err
				}
				defer h.Close()
				var problems []error
				seed := 0
				for _, dt := range tensor.DTypes() {
					for _, op := range tensor.ReduceOps() {
						if !op.Supports(dt) {
							continue
						}
						for _, n := range sizes {
							seed++
							want := tensor.New(dt, n)
							fillExact(want, c.Rank(), seed)
							got := want.Clone()
							if err := c.Allreduce(want, op); err != nil {
								return err
							}
							if err := h.Allreduce(got, op); err != nil {
								return fmt.Errorf("%v %v of %d: %w", op, dt, n, err)
							}
							if d := diff(got, want); d != "" {
								problems = append(problems, fmt.Errorf("%v %v of %d: %s", op, dt, n, d))
							}
						}
					}
				}
				return errors.Join(problems...)
			}))
		})
	}
}

// TestAllreduceRounding runs sums and products of random floats, which the
// two algorithms round differently, and checks that they agree within the
// dtype's precision (and that every rank has the same result). The large
// buffer also takes the in-memory group's parallel path.
func TestAllreduceRounding(t *testing.T) {
	eps := map[tensor.DType]float64{
		tensor.Float32:  0x1p-23,
		tensor.Float64:  0x1p-52,
		tensor.Float16:  0x1p-10,
		tensor.BFloat16: 0x1p-7,
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			report(t, onRanks(t, newGroup(g.opts), func(c comm.Communicator) error {
				h, err := Open(c)
				if err != nil {
					return err
				}
				defer h.Close()
				nr := float64(c.Size())
				rng := rand.New(rand.NewPCG(uint64(c.Rank()), 1))
				var problems []error
				for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64, tensor.Float16, tensor.BFloat16} {
					for _, op := range []tensor.ReduceOp{tensor.Sum, tensor.Product} {
						for _, n := range []int{1001, 40000} {
							vals := make([]float32, n)
							for i := range vals {
								if op == tensor.Sum {
									vals[i] = float32(max(-3, min(3, rng.NormFloat64())))
								} else {
									vals[i] = float32(0.5 + rng.Float64())
								}
							}
							want := tensor.New(dt, n)
							setFloats(want, vals)
							got := want.Clone()
							if err := c.Allreduce(want, op); err != nil {
								return err
							}
							if err := h.Allreduce(got, op); err != nil {
								return err
							}
							// Every rank ends with the same bits.
							same := got.Clone()
							if err := c.Allreduce(same, tensor.Max); err != nil {
								return err
							}
							if d := diff(same, got); d != "" {
								problems = append(problems, fmt.Errorf("%v %v of %d: ranks disagree: %s", op, dt, n, d))
							}
							w, gv := floats(want), floats(got)
							for i := range w {
								tol := eps[dt] * nr * nr * 3 // sums of up to N terms of at most 3
								if op == tensor.Product {
									tol = 4 * eps[dt] * nr * max(math.Abs(w[i]), 1)
								}
								if math.Abs(w[i]-gv[i]) > tol {
									problems = append(problems, fmt.Errorf("%v %v of %d: element %d is %v, flat %v (tolerance %v)", op, dt, n, i, gv[i], w[i], tol))
									break
								}
							}
						}
					}
				}
				return errors.Join(problems...)
			}))
		})
	}
}

// TestAllreduceShape checks that a buffer of several dimensions is reduced
// as its elements, and that a buffer reused after a larger one (the
// scratch space shrinks) comes out right.
func TestAllreduceShape(t *testing.T) {
	report(t, onRanks(t, memcomm.NewGroupNodes(2, 2), func(c comm.Communicator) error {
		h, err := Open(c)
		if err != nil {
			return err
		}
		defer h.Close()
		for _, shape := range [][]int{{50, 41}, {3, 7}, {2, 0, 5}, {}} {
			want := tensor.New(tensor.Int32, shape...)
			fillExact(want, c.Rank(), len(shape))
			got := want.Clone()
			if err := c.Allreduce(want, tensor.Sum); err != nil {
				return err
			}
			if err := h.Allreduce(got, tensor.Sum); err != nil {
				return err
			}
			if d := diff(got, want); d != "" {
				return fmt.Errorf("shape %v: %s", shape, d)
			}
		}
		return nil
	}))
}

// TestAllgatherv compares the hierarchical allgather with the group's flat
// one on every layout of groups, for counts that are zero, uneven, or all
// on one rank, and checks that the receive buffer past the result is left
// alone.
func TestAllgatherv(t *testing.T) {
	patterns := []struct {
		name  string
		count func(r, n int) int
	}{
		{"zeros", func(r, n int) int { return 0 }},
		{"ones", func(r, n int) int { return 1 }},
		{"uneven", func(r, n int) int { return (r*5 + 3) % 4 }},
		{"first only", func(r, n int) int { return 7 * max(0, 1-r) }},
		{"last only", func(r, n int) int { return 5 * max(0, r-n+2) }},
		{"large", func(r, n int) int { return (1000 + 37*r) * (r % 3 % 2) }},
	}
	dtypes := []tensor.DType{tensor.Float32, tensor.Float64, tensor.Float16, tensor.Int64, tensor.Int16, tensor.Uint8, tensor.Bool}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			report(t, onRanks(t, newGroup(g.opts), func(c comm.Communicator) error {
				h, err := Open(c)
				if err != nil {
					return err
				}
				defer h.Close()
				var problems []error
				seed := 0
				for _, p := range patterns {
					counts := make([]int, c.Size())
					for r := range counts {
						counts[r] = p.count(r, c.Size())
					}
					total := comm.Sum(counts)
					for _, dt := range dtypes {
						seed++
						send := tensor.New(dt, counts[c.Rank()])
						fillExact(send, c.Rank(), seed)
						want := tensor.New(dt, total+3)
						fillExact(want, 100+c.Rank(), seed) // the tail must survive
						got := want.Clone()
						if err := c.Allgatherv(send, want, counts); err != nil {
							return err
						}
						if err := h.Allgatherv(send, got, counts); err != nil {
							return fmt.Errorf("%s %v: %w", p.name, dt, err)
						}
						if d := diff(got, want); d != "" {
							problems = append(problems, fmt.Errorf("%s %v, counts %v: %s", p.name, dt, counts, d))
						}
					}
				}
				return errors.Join(problems...)
			}))
		})
	}
}

// TestArgumentErrors checks that arguments one rank can check alone are
// rejected before anything moves, and that the Comms stays usable.
func TestArgumentErrors(t *testing.T) {
	report(t, onRanks(t, memcomm.NewGroupNodes(2, 2), func(c comm.Communicator) error {
		h, err := Open(c)
		if err != nil {
			return err
		}
		defer h.Close()
		f32 := func(n int) *tensor.Tensor { return tensor.New(tensor.Float32, n) }
		ones := []int{1, 1, 1, 1}
		bad := []struct {
			name string
			call func() error
		}{
			{"nil buffer", func() error { return h.Allreduce(nil, tensor.Sum) }},
			{"bitwise on floats", func() error { return h.Allreduce(f32(4), tensor.BitAnd) }},
			{"device buffer", func() error {
				return h.Allreduce(tensor.NewDevice(tensor.Float32, tensor.Device{Kind: tensor.GPU}, 0x1000, 4), tensor.Sum)
			}},
			{"nil send", func() error { return h.Allgatherv(nil, f32(4), ones) }},
			{"nil receive", func() error { return h.Allgatherv(f32(1), nil, ones) }},
			{"short counts", func() error { return h.Allgatherv(f32(1), f32(4), []int{1, 1, 1}) }},
			{"negative count", func() error { return h.Allgatherv(f32(1), f32(4), []int{1, -1, 1, 1}) }},
			{"send size", func() error { return h.Allgatherv(f32(2), f32(4), ones) }},
			{"small receive", func() error { return h.Allgatherv(f32(1), f32(3), ones) }},
			{"dtypes differ", func() error { return h.Allgatherv(f32(1), tensor.New(tensor.Int32, 4), ones) }},
		}
		for _, b := range bad {
			if err := b.call(); err == nil {
				return fmt.Errorf("%s: no error", b.name)
			}
		}
		buf := tensor.FromInt32([]int32{int32(c.Rank())})
		if err := h.Allreduce(buf, tensor.Sum); err != nil || buf.Int32s()[0] != 6 {
			return fmt.Errorf("allreduce after the errors: %v, %v", buf.Int32s(), err)
		}
		return nil
	}))
}

func TestClose(t *testing.T) {
	report(t, onRanks(t, memcomm.NewGroupNodes(2, 2), func(c comm.Communicator) error {
		h, err := Open(c)
		if err != nil {
			return err
		}
		if err := h.Close(); err != nil {
			return err
		}
		if err := h.Close(); err != nil {
			return fmt.Errorf("second close: %w", err)
		}
		buf := tensor.New(tensor.Float32, 4)
		if err := h.Allreduce(buf, tensor.Sum); !errors.Is(err, comm.ErrClosed) {
			return fmt.Errorf("allreduce after close: %v", err)
		}
		if err := h.Allgatherv(buf.Rows(0, 1), buf, []int{1, 1, 1, 1}); !errors.Is(err, comm.ErrClosed) {
			return fmt.Errorf("allgatherv after close: %v", err)
		}
		// The group itself is left open.
		return c.Barrier()
	}))
}

// TestFaults makes one step of a collective fail on one rank and checks
// that the rank gets the failure, that no rank is left waiting, and that
// every rank's next call fails (the communicators are torn down). The
// in-memory group has no timeout here: only the aborts release the ranks.
func TestFaults(t *testing.T) {
	tests := []struct {
		group string
		op    string // "allreduce" or "allgatherv"
		cross bool   // the fault is on Cross, not Local
		kind  fault.Kind
		rank  int
	}{
		{"2x2", "allreduce", false, fault.ReduceScatter, 1},
		{"2x2", "allreduce", true, fault.Allreduce, 2},
		{"2x2", "allreduce", false, fault.Allgatherv, 3},
		{"3x2", "allreduce", false, fault.Allgatherv, 0},
		{"3+1+2", "allreduce", false, fault.ReduceScatter, 2},
		{"3+1+2", "allreduce", true, fault.Allreduce, 0},
		{"3+1+2", "allreduce", true, fault.Allreduce, 3},
		{"3+1+2", "allreduce", false, fault.Bcast, 0},
		{"3+1+2", "allreduce", false, fault.Bcast, 5},
		{"1x4", "allreduce", false, fault.Allreduce, 2},
		{"4x1", "allreduce", true, fault.Allreduce, 1},
		{"2x2", "allgatherv", false, fault.Gatherv, 1},
		{"2x2", "allgatherv", true, fault.Allgatherv, 2},
		{"2x2", "allgatherv", false, fault.Bcast, 0},
		{"2x2", "allgatherv", false, fault.Bcast, 3},
		{"scattered 3+1+2", "allgatherv", false, fault.Gatherv, 3},
		{"scattered 3+1+2", "allgatherv", true, fault.Allgatherv, 1},
		{"scattered 3+1+2", "allgatherv", false, fault.Bcast, 4},
		{"1x4", "allgatherv", false, fault.Allgatherv, 1},
		{"4x1", "allgatherv", true, fault.Allgatherv, 3},
	}
	for _, tt := range tests {
		where := "local"
		if tt.cross {
			where = "cross"
		}
		t.Run(fmt.Sprintf("%s/%s/%s %s on rank %d", tt.group, tt.op, where, tt.kind, tt.rank), func(t *testing.T) {
			report(t, onRanks(t, newGroup(groupNamed(tt.group).opts), func(c comm.Communicator) error {
				h, err := Open(c)
				if err != nil {
					return err
				}
				if c.Rank() == tt.rank {
					rule := fault.Rule{Kind: tt.kind, Call: 1}
					if tt.cross {
						h.Cross = fault.Wrap(h.Cross, rule)
					} else {
						h.Local = fault.Wrap(h.Local, rule)
					}
				}
				call := func() error {
					if tt.op == "allreduce" {
						return h.Allreduce(tensor.New(tensor.Float32, 1000), tensor.Sum)
					}
					counts := make([]int, c.Size())
					for r := range counts {
						counts[r] = 10 + r
					}
					return h.Allgatherv(tensor.New(tensor.Int8, counts[c.Rank()]), tensor.New(tensor.Int8, comm.Sum(counts)), counts)
				}
				first, second := call(), call()
				var fe *fault.Error
				switch {
				case c.Rank() == tt.rank && !errors.As(first, &fe):
					return fmt.Errorf("first call: %v, want the injected failure", first)
				case c.Rank() != tt.rank && first != nil && !errors.Is(first, comm.ErrClosed):
					return fmt.Errorf("first call: %v, want success or a torn-down group", first)
				case !errors.Is(second, comm.ErrClosed):
					return fmt.Errorf("second call: %v, want an error matching comm.ErrClosed", second)
				}
				return nil
			}))
		})
	}
}

// TestOpenFaults makes one of Open's collectives fail, and abort the group,
// on one rank: every rank's Open must return an error.
func TestOpenFaults(t *testing.T) {
	for _, kind := range []fault.Kind{fault.SplitLocal, fault.Split, fault.Allgatherv} {
		t.Run(string(kind), func(t *testing.T) {
			comms := memcomm.NewGroupNodes(2, 2)
			comms[2] = fault.Wrap(comms[2], fault.Rule{Kind: kind, Call: 1, Abort: true})
			report(t, onRanks(t, comms, func(c comm.Communicator) error {
				h, err := Open(c)
				if err == nil {
					h.Close()
					return errors.New("open succeeded")
				}
				return nil
			}))
		})
	}
}

// BenchmarkAllreduce compares the flat allreduce of an in-memory group on
// two simulated nodes of two ranks with the hierarchical one, for 4 MiB of
// float32. The in-memory transport has no network, so this measures the
// algorithms' overhead (more steps, more copies), not their benefit.
func BenchmarkAllreduce(b *testing.B) {
	const elems = 1 << 20
	for _, algo := range []string{"flat", "hier"} {
		b.Run(algo, func(b *testing.B) {
			comms := memcomm.NewGroupNodes(2, 2)
			calls := make([]func(*tensor.Tensor) error, len(comms))
			bufs := make([]*tensor.Tensor, len(comms))
			for r := range bufs {
				bufs[r] = tensor.New(tensor.Float32, elems)
			}
			// One call before the clock starts, so that the scratch
			// buffers are allocated and the figures are the steady state.
			errs := onRanks(b, comms, func(c comm.Communicator) error {
				r := c.Rank()
				calls[r] = func(t *tensor.Tensor) error { return c.Allreduce(t, tensor.Sum) }
				if algo == "hier" {
					h, err := Open(c)
					if err != nil {
						return err
					}
					calls[r] = func(t *tensor.Tensor) error { return h.Allreduce(t, tensor.Sum) }
				}
				return calls[r](bufs[r])
			})
			if err := errors.Join(errs...); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(4 * elems)
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for r := 1; r < len(comms); r++ {
				wg.Go(func() {
					for range b.N {
						if err := calls[r](bufs[r]); err != nil {
							panic(err)
						}
					}
				})
			}
			for range b.N {
				if err := calls[0](bufs[0]); err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
		})
	}
}
