package elastic

import (
	"fmt"
	"slices"
	"testing"
)

// group is a simulated group of ranks, each with its own Sampler.
type group []*Sampler

// step runs one training step on every rank: each takes its next batch,
// then all record it. It returns the indices processed, and checks that
// every rank agrees on the number of batches and on the position.
func (g group) step(t *testing.T) []int {
	t.Helper()
	var got []int
	nb := -1
	for r, s := range g {
		bs := s.Batches()
		if nb >= 0 && len(bs) != nb {
			t.Fatalf("rank %d has %d batches left, rank 0 %d", r, len(bs), nb)
		}
		nb = len(bs)
		if nb == 0 {
			t.Fatalf("rank %d: step with no batch left", r)
		}
		if len(bs[0]) > s.batch {
			t.Fatalf("rank %d: batch of %d > %d", r, len(bs[0]), s.batch)
		}
		got = append(got, bs[0]...)
	}
	for _, s := range g {
		s.Record()
	}
	for r, s := range g {
		if s.Processed() != g[0].Processed() {
			t.Fatalf("rank %d is at %d, rank 0 at %d", r, s.Processed(), g[0].Processed())
		}
	}
	return got
}

func (g group) done() bool { return len(g[0].Batches()) == 0 }

// resize re-forms the group at size: survivors keep their samplers (with
// new ranks), newcomers take rank 0's state.
func (g group) resize(t *testing.T, size int) group {
	t.Helper()
	out := make(group, size)
	for r := range size {
		if r < len(g) {
			if err := g[r].SetPlacement(r, size); err != nil {
				t.Fatal(err)
			}
			out[r] = g[r]
			continue
		}
		s, err := NewSampler(g[0].n, g[0].batch, g[0].seed, r, size)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.setState(g[0].state()); err != nil {
			t.Fatal(err)
		}
		out[r] = s
	}
	return out
}

func newGroup(t *testing.T, n, batch, size int, seed uint64, epoch int) group {
	t.Helper()
	g := make(group, size)
	for r := range g {
		s, err := NewSampler(n, batch, seed, r, size)
		if err != nil {
			t.Fatal(err)
		}
		s.SetEpoch(epoch)
		g[r] = s
	}
	return g
}

// exactlyOnce checks that seen holds every index of [0, n) once.
func exactlyOnce(t *testing.T, n int, seen []int) {
	t.Helper()
	count := make([]int, n)
	for _, i := range seen {
		if i < 0 || i >= n {
			t.Fatalf("index %d out of [0, %d)", i, n)
		}
		count[i]++
	}
	for i, c := range count {
		if c != 1 {
			t.Fatalf("index %d processed %d times (of %d samples, %d processed)", i, c, n, len(seen))
		}
	}
}

func TestSamplerResizeMidEpoch(t *testing.T) {
	for _, tc := range []struct {
		n, batch, from, steps, to int
	}{
		{n: 100, batch: 4, from: 4, steps: 3, to: 3},
		{n: 100, batch: 4, from: 2, steps: 5, to: 4},
		{n: 101, batch: 3, from: 4, steps: 2, to: 3},
		{n: 37, batch: 5, from: 2, steps: 1, to: 4},
		{n: 7, batch: 2, from: 3, steps: 1, to: 2},
		{n: 13, batch: 4, from: 4, steps: 0, to: 3},
		{n: 9, batch: 1, from: 2, steps: 4, to: 5}, // more ranks than samples left
		{n: 3, batch: 8, from: 1, steps: 0, to: 4}, // ranks with nothing
	} {
		t.Run(fmt.Sprintf("n%d_b%d_%dto%d_after%d", tc.n, tc.batch, tc.from, tc.to, tc.steps), func(t *testing.T) {
			g := newGroup(t, tc.n, tc.batch, tc.from, 7, 3)
			var seen []int
			for range tc.steps {
				seen = append(seen, g.step(t)...)
			}
			if got := g[0].Processed(); got != len(seen) {
				t.Fatalf("position %d after processing %d", got, len(seen))
			}
			g = g.resize(t, tc.to)
			if got := g[0].Processed(); got != len(seen) {
				t.Fatalf("position %d after resize, want %d", got, len(seen))
			}
			for !g.done() {
				seen = append(seen, g.step(t)...)
			}
			exactlyOnce(t, tc.n, seen)
			if g[0].Processed() != tc.n || g[0].Remaining() != 0 {
				t.Fatalf("end of epoch at %d, %d remaining", g[0].Processed(), g[0].Remaining())
			}
		})
	}
}

func TestSamplerEpochsDiffer(t *testing.T) {
	a := newGroup(t, 50, 50, 1, 1, 0)[0]
	b := newGroup(t, 50, 50, 1, 1, 1)[0]
	c := newGroup(t, 50, 50, 1, 1, 1)[0]
	if slices.Equal(a.Indices(), b.Indices()) {
		t.Fatal("epochs 0 and 1 have the same permutation")
	}
	if !slices.Equal(b.Indices(), c.Indices()) {
		t.Fatal("the same seed and epoch give different permutations")
	}
	exactlyOnce(t, 50, a.Indices())
}

// TestSamplerRestore commits mid-epoch, processes more, restores (at the
// same size, and at another size) and checks what is re-yielded.
func TestSamplerRestore(t *testing.T) {
	for _, tc := range []struct {
		n, batch, size, commitAt, failAt, to int
	}{
		{n: 100, batch: 4, size: 4, commitAt: 2, failAt: 5, to: 4},
		{n: 100, batch: 4, size: 4, commitAt: 2, failAt: 5, to: 3},
		{n: 61, batch: 3, size: 2, commitAt: 3, failAt: 4, to: 4},
		{n: 23, batch: 2, size: 3, commitAt: 0, failAt: 3, to: 2},
	} {
		t.Run(fmt.Sprintf("n%d_%dto%d", tc.n, tc.size, tc.to), func(t *testing.T) {
			g := newGroup(t, tc.n, tc.batch, tc.size, 11, 0)
			hs := make([]*SamplerHandler, len(g))
			var committed, uncommitted []int
			for step := 0; step < tc.failAt; step++ {
				if step == tc.commitAt {
					for r := range g {
						hs[r] = NewSamplerHandler(g[r])
						if err := hs[r].Save(); err != nil {
							t.Fatal(err)
						}
					}
				}
				got := g.step(t)
				if step < tc.commitAt {
					committed = append(committed, got...)
				} else {
					uncommitted = append(uncommitted, got...)
				}
			}
			// The failure: every rank restores, then the group re-forms.
			for r := range g {
				if err := hs[r].Restore(); err != nil {
					t.Fatal(err)
				}
			}
			if got := g[0].Processed(); got != len(committed) {
				t.Fatalf("restored to position %d, want %d", got, len(committed))
			}
			g = g.resize(t, tc.to)
			var again []int
			for !g.done() {
				again = append(again, g.step(t)...)
			}
			exactlyOnce(t, tc.n, append(slices.Clone(committed), again...))
			if tc.to == tc.size {
				// At the same size the same batches come again, in order.
				if !slices.Equal(again[:len(uncommitted)], uncommitted) {
					t.Fatalf("re-yielded %v, want %v", again[:len(uncommitted)], uncommitted)
				}
			}
		})
	}
}

func TestSamplerErrors(t *testing.T) {
	for _, tc := range []struct{ n, batch, rank, size int }{
		{-1, 1, 0, 1}, {10, 0, 0, 1}, {10, 1, 1, 1}, {10, 1, -1, 2}, {10, 1, 0, 0},
	} {
		if _, err := NewSampler(tc.n, tc.batch, 0, tc.rank, tc.size); err == nil {
			t.Errorf("NewSampler(%v) succeeded", tc)
		}
	}
	s, _ := NewSampler(10, 2, 1, 0, 1)
	if err := s.setState(samplerState{N: 11, Batch: 2, Seed: 1}); err == nil {
		t.Error("state of another dataset accepted")
	}
	if err := s.setState(samplerState{N: 10, Batch: 2, Seed: 1, Processed: 11}); err == nil {
		t.Error("position past the end accepted")
	}
}
