package cache

import (
	"reflect"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

func req(name string, shape ...int64) wire.Request {
	return wire.Request{Type: wire.Allreduce, DType: tensor.Float32, Name: name, Device: wire.CPU, Shape: shape,
		Prescale: 1, Postscale: 1, Op: wire.Sum}
}

func resp(ranks int, names ...string) wire.Response {
	r := wire.Response{Type: wire.ResponseType(wire.Allreduce), Names: names, DType: tensor.Float32,
		Prescale: 1, Postscale: 1, Op: wire.Sum, Devices: make([]int32, ranks)}
	for i := range r.Devices {
		r.Devices[i] = wire.CPU
	}
	for range names {
		r.Sizes = append(r.Sizes, 4)
		r.Shapes = append(r.Shapes, []int64{4})
	}
	return r
}

func TestLookup(t *testing.T) {
	c := New(8, 0)
	r := resp(2, "a", "b") // fused: split per tensor
	c.Put(&r)
	if c.Len() != 2 {
		t.Fatalf("len %d", c.Len())
	}
	tests := []struct {
		name string
		req  wire.Request
		want State
	}{
		{"hit", req("a", 4), Hit},
		{"miss", req("zz", 4), Miss},
		{"shape changed", req("b", 5), Invalid},
		{"dtype changed", func() wire.Request { q := req("a", 4); q.DType = tensor.Float64; return q }(), Invalid},
		{"op changed", func() wire.Request { q := req("a", 4); q.Op = wire.Max; return q }(), Invalid},
		{"scale changed", func() wire.Request { q := req("a", 4); q.Postscale = 2; return q }(), Invalid},
		{"device changed", func() wire.Request { q := req("a", 4); q.Device = 0; return q }(), Invalid},
		{"type changed", func() wire.Request { q := req("a", 4); q.Type = wire.Allgather; return q }(), Invalid},
	}
	bitA, _ := c.BitOf("a")
	bitB, _ := c.BitOf("b")
	for _, tt := range tests {
		got, bit := c.Lookup(&tt.req)
		if got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
		// Whatever the hint, LookupHint agrees with Lookup.
		for _, hint := range []int{-1, bitA, bitB, 99} {
			if st, b := c.LookupHint(&tt.req, hint); st != got || b != bit {
				t.Errorf("%s: hint %d gives %v at %d, Lookup %v at %d", tt.name, hint, st, b, got, bit)
			}
		}
	}
	// A hint at a freed bit falls back to the name.
	c.Erase(bitA)
	if st, _ := c.LookupHint(&tests[0].req, bitA); st != Miss {
		t.Errorf("hint at an erased bit: %v, want miss", st)
	}
	// Broadcasts are never cached.
	b := resp(2, "bc")
	b.Type = wire.ResponseType(wire.Broadcast)
	c.Put(&b)
	if _, ok := c.BitOf("bc"); ok {
		t.Fatal("broadcast cached")
	}
}

func TestAllgatherHitUsesOwnRows(t *testing.T) {
	r := wire.Response{Type: wire.ResponseType(wire.Allgather), Names: []string{"g"}, DType: tensor.Float32,
		Devices: []int32{-1, -1}, Sizes: []int64{2, 5}, Shapes: [][]int64{{2, 3}}, Prescale: 1, Postscale: 1}
	for rank, rows := range []int64{2, 5} {
		c := New(4, rank)
		c.Put(&r)
		q := wire.Request{Type: wire.Allgather, DType: tensor.Float32, Name: "g", Device: -1, Shape: []int64{rows, 3}, Prescale: 1, Postscale: 1}
		if st, _ := c.Lookup(&q); st != Hit {
			t.Errorf("rank %d: %v, want hit", rank, st)
		}
		q.Shape = []int64{rows + 1, 3}
		if st, _ := c.Lookup(&q); st != Invalid {
			t.Errorf("rank %d, other rows: %v, want invalid", rank, st)
		}
	}
}

func TestLRUEvictionAndBits(t *testing.T) {
	c := New(3, 0)
	for _, n := range []string{"a", "b", "c"} {
		r := resp(1, n)
		if c.Put(&r) {
			t.Fatal("eviction reported before the cache is full")
		}
	}
	c.Get(0) // a becomes most recently used: order b, c, a
	if got, want := c.LRU(), []int{1, 2, 0}; !reflect.DeepEqual(got, want) {
		t.Fatalf("LRU %v, want %v", got, want)
	}
	r := resp(1, "d")
	if !c.Put(&r) {
		t.Fatal("first eviction not reported")
	}
	if _, ok := c.BitOf("b"); ok {
		t.Fatal("least recently used entry not evicted")
	}
	if bit, _ := c.BitOf("d"); bit != 1 {
		t.Fatalf("new entry got bit %d, want the evicted bit 1", bit)
	}
	r = resp(1, "e")
	if c.Put(&r) {
		t.Fatal("second eviction reported as first")
	}
	if n := c.Evictions(); n != 2 {
		t.Fatalf("Evictions() = %d after two evictions, want 2", n)
	}
	if n := c.Evictions(); n != 0 {
		t.Fatalf("Evictions() = %d on the second call, want 0 (it counts since the last call)", n)
	}
	// Erasing the highest bit shortens the vector; the lowest free bit is reused.
	c.Erase(2)
	if c.Bits() != 2 {
		t.Fatalf("bits %d after erasing the top bit", c.Bits())
	}
	c.Erase(0)
	r = resp(1, "f")
	c.Put(&r)
	if bit, _ := c.BitOf("f"); bit != 0 {
		t.Fatalf("lowest free bit not reused: %d", bit)
	}
}

// TestAgreement scripts one cycle of the bit-vector agreement across three
// ranks whose caches hold the same entries.
func TestAgreement(t *testing.T) {
	const n = 3
	caches := make([]*Cache, n)
	for r := range caches {
		caches[r] = New(16, r)
		for _, name := range []string{"a", "b", "c"} {
			x := resp(n, name)
			caches[r].Put(&x)
		}
	}
	submitted := [][]wire.Request{
		{req("a", 4), req("b", 4), req("new", 2)},
		{req("a", 4), req("b", 4), req("c", 4)},
		{req("b", 4), req("a", 4), req("c", 9)}, // c changed shape on rank 2
	}
	syncs := make([]Sync, n)
	for r := range syncs {
		s := &syncs[r]
		s.Reset(caches[r].Bits())
		for i := range submitted[r] {
			switch st, bit := caches[r].Lookup(&submitted[r][i]); st {
			case Hit:
				s.Hit(bit)
			case Invalid:
				s.MarkInvalid(bit)
				s.SetUncached()
			default:
				s.SetUncached()
			}
		}
	}
	and := append([]uint64(nil), syncs[0].Words()...)
	or := append([]uint64(nil), syncs[0].InvalidWords()...)
	for r := 1; r < n; r++ {
		for i, w := range syncs[r].Words() {
			and[i] &= w
		}
		for i, w := range syncs[r].InvalidWords() {
			or[i] |= w
		}
	}
	for r := range syncs {
		copy(syncs[r].Words(), and)
		copy(syncs[r].InvalidWords(), or)
		s := &syncs[r]
		if s.Shutdown() || !s.Uncached() || !s.Invalid() {
			t.Fatalf("rank %d status: shutdown %v uncached %v invalid %v", r, s.Shutdown(), s.Uncached(), s.Invalid())
		}
		if got := s.AppendCommonHits(nil); !reflect.DeepEqual(got, []int{0, 1}) {
			t.Fatalf("rank %d common hits %v", r, got)
		}
		if got := s.AppendInvalid(nil); !reflect.DeepEqual(got, []int{2}) {
			t.Fatalf("rank %d invalid %v", r, got)
		}
	}
	// Steady state: nothing uncached, one rank shutting down.
	var s Sync
	s.Reset(200)
	if s.Uncached() || s.Shutdown() || s.Invalid() {
		t.Fatal("fresh vector reports conditions")
	}
	s.Hit(150)
	s.SetShutdown()
	if !s.Shutdown() || !s.IsHit(150) || len(s.Words()) != 4 {
		t.Fatalf("vector %v", s.Words())
	}
	if got := s.AppendCommonHits(nil); !reflect.DeepEqual(got, []int{150}) {
		t.Fatalf("hits %v", got)
	}
}

func BenchmarkSyncCycle(b *testing.B) {
	var s Sync
	hits := make([]int, 0, 161)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s.Reset(161)
		for bit := 0; bit < 161; bit++ {
			s.Hit(bit)
		}
		hits = s.AppendCommonHits(hits[:0])
	}
}
