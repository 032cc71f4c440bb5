package runtime

import (
	"fmt"
	goruntime "runtime"
	"slices"
	"testing"
	"time"
	"weak"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/tensor"
)

// startClusterWith starts n runtimes over one in-memory group (each
// communicator wrapped in a counting one) with the test configuration and
// the logger off, then opts; they shut down when the test ends.
func startClusterWith(t *testing.T, n int, opts ...Option) *cluster {
	t.Helper()
	group := memcomm.NewGroupWith(n, memcomm.GroupOptions{Timeout: 30 * time.Second})
	counts := make([]*counting, n)
	coms := make([]comm.Communicator, n)
	for i := range counts {
		counts[i] = &counting{Communicator: group[i]}
		coms[i] = counts[i]
	}
	t.Cleanup(func() { group[0].Close() }) // after startOver's Shutdowns
	c := startOver(t, coms, opts...)
	c.counts = counts
	return c
}

// TestFusedPiecesAndInPlace checks the host allreduce paths against the
// knobs that shape them: fused responses reduced in pieces that cut
// tensors in the middle, tensors above the fused-size limit reduced in
// place, and large tensors in transport chunks. Every element must come
// out reduced exactly once, scaled once, in the right tensor, and the number
// of transport calls must be the one the knobs imply.
func TestFusedPiecesAndInPlace(t *testing.T) {
	sizes := []int{1, 3, 5, 7, 13, 40, 2, 9} // float32 elements: 4..160 bytes
	tests := []struct {
		name                      string
		fchunk, chunk             int
		maxFused                  int64
		inPlace                   bool
		wantCalls                 int64 // data allreduces per step
		prescale, postscale, want float64
	}{
		// 80 elements = 320 bytes, one fused response.
		{name: "one piece", fchunk: 1 << 20, chunk: 1 << 20, wantCalls: 1, prescale: 1, postscale: 1, want: 3},
		{name: "12-byte pieces", fchunk: 12, chunk: 1 << 20, wantCalls: 27, prescale: 1, postscale: 1, want: 3},
		{name: "unaligned piece rounds down to elements", fchunk: 30, chunk: 1 << 20, wantCalls: 12, prescale: 1, postscale: 1, want: 3},
		{name: "pieces and scaling", fchunk: 8, chunk: 1 << 20, wantCalls: 40, prescale: 2, postscale: 0.5, want: 3},
		{name: "pieces, not in place", fchunk: 16, chunk: 1 << 20, inPlace: false, wantCalls: 20, prescale: 1, postscale: 1, want: 3},
		// Above 20 bytes (5 elements) in place: 7, 13, 40, 9 alone; 1+3+5+2 fused.
		{name: "large ones in place", fchunk: 1 << 20, chunk: 1 << 20, maxFused: 20, inPlace: true, wantCalls: 5, prescale: 1, postscale: 1, want: 3},
		// 16-byte transport chunks: 7→2, 13→4, 40→10, 9→3 calls, the 44 fused bytes 3.
		{name: "in place in chunks", fchunk: 1 << 20, chunk: 16, maxFused: 20, inPlace: true, wantCalls: 22, prescale: 3, postscale: 1, want: 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startClusterWith(t, 2, WithFusionChunkBytes(tt.fchunk), WithChunkBytes(tt.chunk), WithMaxFusedBytes(tt.maxFused))
			for step := 0; step < 2; step++ {
				before := c.counts[0].dataAllreduce.Load()
				c.each(t, func(r *Runtime, rank int) error {
					ts := make([]*tensor.Tensor, len(sizes))
					for i, n := range sizes {
						ts[i] = tensor.New(tensor.Float32, n)
						for j := range ts[i].Float32s() {
							// Rank 0 holds 1, rank 1 holds 2: the sum is 3.
							ts[i].Float32s()[j] = float32(rank + 1)
						}
					}
					opts := []CallOption{Prescale(tt.prescale), Postscale(tt.postscale)}
					var outs []*tensor.Tensor
					if tt.inPlace {
						h, err := r.GroupedAllreduceAsyncInPlace(ts, "pieces", Sum, opts...)
						if err != nil {
							return err
						}
						if err := h.Wait(ctxT(t)); err != nil {
							return err
						}
						outs = ts
					} else {
						var err error
						if outs, err = r.GroupedAllreduce(ctxT(t), ts, "pieces", Sum, opts...); err != nil {
							return err
						}
						for i, x := range ts[0].Float32s() {
							if x != float32(rank+1) {
								return fmt.Errorf("input 0[%d] changed to %v", i, x)
							}
						}
					}
					for i, o := range outs {
						if o.Len() != sizes[i] {
							return fmt.Errorf("output %d has %d elements, want %d", i, o.Len(), sizes[i])
						}
						for j, x := range o.Float32s() {
							if float64(x) != tt.want {
								return fmt.Errorf("output %d[%d] = %v, want %v", i, j, x, tt.want)
							}
						}
					}
					return nil
				})
				// The first step negotiates, the second comes from the
				// cache: both perform the same calls.
				if got := c.counts[0].dataAllreduce.Load() - before; got != tt.wantCalls {
					t.Errorf("step %d: %d data allreduces, want %d", step, got, tt.wantCalls)
				}
			}
		})
	}
}

// TestFlatTensorsReducedInPlace checks fused pieces that lie in one run of
// memory (tensors that are views of one flat buffer) are reduced where they
// lie, and that ranks whose layouts differ still make the same calls and
// get the same sums: rank 0's tensors are views of one flat buffer in
// submission order, rank 1's are separate allocations, rank 2's are flat
// but in reverse order (no two neighbours in submission order follow each
// other), and rank 3's first half is flat and its second half separate.
func TestFlatTensorsReducedInPlace(t *testing.T) {
	sizes := []int{3, 5, 1, 8, 13, 2, 7, 4} // float32 elements
	total := 0
	for _, n := range sizes {
		total += n * 4
	}
	const fchunk = 24 // pieces of 6 elements, cutting tensors in the middle
	c := startClusterWith(t, 4, WithFusionChunkBytes(fchunk), WithMaxFusedBytes(0))
	layout := func(rank int) []*tensor.Tensor {
		ts := make([]*tensor.Tensor, len(sizes))
		shapes := make([]tensor.Shape, len(sizes))
		for i, n := range sizes {
			shapes[i] = tensor.Shape{n}
		}
		switch rank {
		case 0:
			_, ts = tensor.NewFlat(tensor.Float32, shapes...)
		case 2:
			rev := slices.Clone(shapes)
			slices.Reverse(rev)
			_, parts := tensor.NewFlat(tensor.Float32, rev...)
			for i := range ts {
				ts[i] = parts[len(parts)-1-i]
			}
		case 3:
			_, parts := tensor.NewFlat(tensor.Float32, shapes[:4]...)
			copy(ts, parts)
		}
		for i, n := range sizes {
			if ts[i] == nil {
				ts[i] = tensor.New(tensor.Float32, n)
			}
		}
		return ts
	}
	names := make([]string, len(sizes))
	for i := range names {
		names[i] = fmt.Sprintf("flat.%d", i)
	}
	const steps = 3
	c.each(t, func(r *Runtime, rank int) error {
		ts := layout(rank)
		g, err := r.NewAllreduceGroup(ts, names, Sum, Prescale(2), Postscale(0.25))
		if err != nil {
			return err
		}
		for step := 0; step < steps; step++ {
			// Element j of tensor i on rank k holds 100(k+1) + 10i + j: every
			// element's sum over the 4 ranks is distinct.
			err := groupStep(ctxT(t), g, ts, step,
				func(i, j int) float32 { return float32(100*(rank+1) + 10*i + j) },
				// (100·(1+2+3+4) + 4(10i+j))·2·0.25
				func(i, j int) float32 { return float32(1000+4*(10*i+j)) / 2 })
			if err != nil {
				return err
			}
		}
		return nil
	})
	// What each rank reduces in place: the pieces that lie wholly inside
	// one run of neighbours. runs[k] gives each tensor's run on rank k.
	runs := [][]int{
		{0, 0, 0, 0, 0, 0, 0, 0},
		{0, 1, 2, 3, 4, 5, 6, 7},
		{0, 1, 2, 3, 4, 5, 6, 7},
		{0, 0, 0, 0, 4, 5, 6, 7},
	}
	wantInPlace := make([]int64, len(runs))
	for rank, run := range runs {
		var of []int // the run of every byte
		for i, n := range sizes {
			for range n * 4 {
				of = append(of, run[i])
			}
		}
		for off := 0; off < total; off += fchunk {
			end := min(off+fchunk, total)
			if of[off] == of[end-1] {
				wantInPlace[rank] += int64(end - off)
			}
		}
	}
	if wantInPlace[0] != int64(total) || wantInPlace[1] == 0 || wantInPlace[3] <= wantInPlace[1] {
		t.Fatalf("the layouts do not exercise the cases: %v", wantInPlace)
	}
	for rank, r := range c.rts {
		s := r.Stats()
		if got := s.FusedInPlace; got != steps*wantInPlace[rank] {
			t.Errorf("rank %d: %d bytes reduced in place, want %d", rank, got, steps*wantInPlace[rank])
		}
		if got := s.FusedCopied + s.FusedInPlace; got != steps*int64(total) {
			t.Errorf("rank %d: %d fused bytes in all, want %d", rank, got, steps*total)
		}
	}
}

// TestTransportViewsKeepNothingAlive checks that the views the loop keeps
// for reuse over a caller's tensor (here one reduced in transport chunks)
// do not keep the tensor's memory alive once the caller drops it.
func TestTransportViewsKeepNothingAlive(t *testing.T) {
	c := startClusterWith(t, 2, WithChunkBytes(64), WithMaxFusedBytes(64))
	gone := make([]weak.Pointer[float32], 2)
	c.each(t, func(r *Runtime, rank int) error {
		data := make([]float32, 256) // 1 KiB: 16 chunks
		gone[rank] = weak.Make(&data[0])
		return r.AllreduceInPlace(ctxT(t), tensor.FromFloat32(data), "dropped", Sum)
	})
	for i := 0; i < 5 && (gone[0].Value() != nil || gone[1].Value() != nil); i++ {
		goruntime.GC()
	}
	for rank, w := range gone {
		if w.Value() != nil {
			t.Errorf("rank %d: the reduced tensor's memory is still alive", rank)
		}
	}
}

// TestFlatResponseReducedWhole checks that a fused response whose tensors
// lie in one run of memory on every rank is reduced where it lies in
// transport chunks, not in fusion pieces (each piece is one more
// collective to wait in), and that where one rank's layout is not one run
// every rank still reduces it in the same pieces.
func TestFlatResponseReducedWhole(t *testing.T) {
	sizes := []int{3, 5, 1, 8, 13, 2, 7, 4} // 43 float32 elements, 172 bytes
	total := 0
	for _, n := range sizes {
		total += 4 * n
	}
	const fchunk = 24 // 8 pieces
	tests := []struct {
		name      string
		chunk     int
		flat      []bool // per rank
		wantCalls int64
	}{
		{name: "flat everywhere", chunk: 1 << 20, flat: []bool{true, true}, wantCalls: 1},
		{name: "flat everywhere, in transport chunks", chunk: 64, flat: []bool{true, true}, wantCalls: 3},
		{name: "one rank separate", chunk: 1 << 20, flat: []bool{true, false}, wantCalls: 8},
		{name: "three ranks, one separate", chunk: 1 << 20, flat: []bool{true, true, false}, wantCalls: 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(tt.flat)
			c := startClusterWith(t, n, WithFusionChunkBytes(fchunk), WithChunkBytes(tt.chunk), WithMaxFusedBytes(0))
			names := make([]string, len(sizes))
			for i := range names {
				names[i] = fmt.Sprintf("whole.%d", i)
			}
			const steps = 2
			c.each(t, func(r *Runtime, rank int) error {
				ts := float32Tensors(sizes, tt.flat[rank])
				g, err := r.NewAllreduceGroup(ts, names, Sum)
				if err != nil {
					return err
				}
				defer g.Close()
				for step := 0; step < steps; step++ {
					err := groupStep(ctxT(t), g, ts, step,
						func(i, j int) float32 { return float32(100*(rank+1) + 10*i + j) },
						func(i, j int) float32 { return float32(100*n*(n+1)/2 + n*(10*i+j)) })
					if err != nil {
						return err
					}
				}
				return nil
			})
			for rank, k := range c.counts {
				if got := k.dataAllreduce.Load(); got != steps*tt.wantCalls {
					t.Errorf("rank %d: %d data allreduces in %d steps, want %d", rank, got, steps, steps*tt.wantCalls)
				}
				s := c.rts[rank].Stats()
				if got := s.FusedCopied + s.FusedInPlace; got != steps*int64(total) {
					t.Errorf("rank %d: %d fused bytes, want %d", rank, got, steps*total)
				}
				if whole := tt.wantCalls < 8; whole && (s.FusedInPlace != steps*int64(total) || s.FusedWhole != steps) {
					t.Errorf("rank %d: %d bytes reduced in place, %d responses whole; want all %d, %d", rank, s.FusedInPlace, s.FusedWhole, steps*total, steps)
				} else if !whole && s.FusedWhole != 0 {
					t.Errorf("rank %d: %d responses reduced whole, want none", rank, s.FusedWhole)
				}
			}
		})
	}
}
