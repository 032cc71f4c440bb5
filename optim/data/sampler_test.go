package data

import (
	"fmt"
	"slices"
	"testing"
)

// shards builds an independent sampler per rank, as separate processes
// would, and returns each rank's indices for epoch.
func shards(t *testing.T, n, size, epoch int, opts ...Option) [][]int {
	t.Helper()
	out := make([][]int, size)
	for r := range size {
		s, err := NewSampler(n, r, size, opts...)
		if err != nil {
			t.Fatal(err)
		}
		s.SetEpoch(epoch)
		out[r] = s.Indices()
		if len(out[r]) != s.Len() {
			t.Fatalf("rank %d: %d indices, Len %d", r, len(out[r]), s.Len())
		}
	}
	return out
}

func TestShardsPartitionTheDataset(t *testing.T) {
	cases := []struct {
		n, size  int
		dropLast bool
		shuffle  bool
	}{
		{10, 1, false, true}, {10, 2, false, true}, {10, 3, false, true}, {10, 3, true, true},
		{10, 4, false, false}, {10, 4, true, false}, {3, 4, false, true}, {60000, 4, false, true},
		{59999, 4, true, true}, {7, 7, true, true}, {1, 3, false, true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("n%d/size%d/drop%v/shuffle%v", c.n, c.size, c.dropLast, c.shuffle), func(t *testing.T) {
			opts := []Option{Shuffle(c.shuffle, 42)}
			if c.dropLast {
				opts = append(opts, DropLast())
			}
			got := shards(t, c.n, c.size, 3, opts...)
			per := (c.n + c.size - 1) / c.size
			if c.dropLast {
				per = c.n / c.size
			}
			count := make([]int, c.n)
			for r, idx := range got {
				if len(idx) != per {
					t.Fatalf("rank %d has %d indices, want %d (equal counts)", r, len(idx), per)
				}
				for _, i := range idx {
					if i < 0 || i >= c.n {
						t.Fatalf("rank %d: index %d out of range", r, i)
					}
					count[i]++
				}
			}
			covered, dups := 0, 0
			for _, k := range count {
				if k > 0 {
					covered++
				}
				if k > 1 {
					dups += k - 1
				}
			}
			total := per * c.size
			if c.dropLast {
				// Disjoint: each kept index exactly once, n - total dropped.
				if dups != 0 || covered != total {
					t.Fatalf("covered %d (want %d), %d duplicates (want 0)", covered, total, dups)
				}
			} else {
				// Every sample seen; only the padding repeats.
				if covered != c.n || dups != total-c.n {
					t.Fatalf("covered %d (want %d), %d duplicates (want %d)", covered, c.n, dups, total-c.n)
				}
			}
		})
	}
}

func TestUnshuffledIsStrided(t *testing.T) {
	got := shards(t, 10, 4, 5, Shuffle(false, 0))
	want := [][]int{{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}}
	for r := range want {
		if !slices.Equal(got[r], want[r]) {
			t.Fatalf("rank %d: %v, want %v", r, got[r], want[r])
		}
	}
}

func TestEpochReshuffles(t *testing.T) {
	a := shards(t, 1000, 2, 0, Shuffle(true, 7))
	again := shards(t, 1000, 2, 0, Shuffle(true, 7))
	b := shards(t, 1000, 2, 1, Shuffle(true, 7))
	other := shards(t, 1000, 2, 0, Shuffle(true, 8))
	if !slices.Equal(a[0], again[0]) || !slices.Equal(a[1], again[1]) {
		t.Fatal("same seed and epoch gave different shards")
	}
	if slices.Equal(a[0], b[0]) {
		t.Fatal("SetEpoch did not reshuffle")
	}
	if slices.Equal(a[0], other[0]) {
		t.Fatal("a different seed gave the same shard")
	}
	if slices.IsSorted(a[0]) {
		t.Fatal("shuffled shard is sorted")
	}
}

func TestBatches(t *testing.T) {
	for _, dropLast := range []bool{false, true} {
		var n0 []int
		for r := range 3 {
			s, err := NewSampler(100, r, 3)
			if err != nil {
				t.Fatal(err)
			}
			bs := s.Batches(8, dropLast)
			sizes := []int{}
			flat := []int{}
			for _, b := range bs {
				sizes = append(sizes, len(b))
				flat = append(flat, b...)
			}
			want := []int{8, 8, 8, 8, 2} // 34 per rank
			if dropLast {
				want = want[:4]
			}
			if !slices.Equal(sizes, want) {
				t.Fatalf("rank %d dropLast %v: batch sizes %v, want %v", r, dropLast, sizes, want)
			}
			if !slices.Equal(flat, s.Indices()[:len(flat)]) {
				t.Fatal("batches are not the shard in order")
			}
			if r == 0 {
				n0 = sizes
			} else if !slices.Equal(n0, sizes) {
				t.Fatal("ranks disagree on batches")
			}
		}
	}
}

func TestNewSamplerErrors(t *testing.T) {
	cases := []struct {
		n, rank, size int
		opts          []Option
	}{
		{10, -1, 2, nil}, {10, 2, 2, nil}, {10, 0, 0, nil}, {-1, 0, 1, nil}, {3, 0, 4, []Option{DropLast()}},
	}
	for _, c := range cases {
		if _, err := NewSampler(c.n, c.rank, c.size, c.opts...); err == nil {
			t.Errorf("NewSampler(%d, %d, %d) accepted", c.n, c.rank, c.size)
		}
	}
	s, err := NewSampler(0, 0, 2)
	if err != nil || len(s.Indices()) != 0 {
		t.Fatalf("empty dataset: %v, %v", err, s)
	}
}

func ExampleSampler() {
	for rank := range 2 {
		s, _ := NewSampler(5, rank, 2, Shuffle(false, 0))
		s.SetEpoch(0)
		fmt.Println(rank, s.Indices())
	}
	// Output:
	// 0 [0 2 4]
	// 1 [1 3 0]
}
