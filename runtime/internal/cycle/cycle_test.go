package cycle

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/cache"
	"github.com/gohorovod/gohorovod/runtime/internal/negotiate"
	"github.com/gohorovod/gohorovod/runtime/internal/stall"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// cluster scripts whole cycles of n ranks in one goroutine: each rank's
// State, its queue of requests, and its Negotiation (rank 0's with the
// coordinator). The transport is replaced by the operations it performs:
// an AND, an OR, and the collectives the negotiation's steps ask for
// (runSteps).
type cluster struct {
	t      *testing.T
	n      int
	states []*State
	queues [][]wire.Request // requests not yet performed, per rank, in order
	bits   [][]int          // cache bit hints, parallel to queues
	negs   []*Negotiation   // rank 0's holds the coordinator
	now    time.Time
}

func newCluster(t *testing.T, n, capacity int) *cluster {
	c := &cluster{t: t, n: n, queues: make([][]wire.Request, n), bits: make([][]int, n),
		now: time.Unix(1000, 0)}
	for r := 0; r < n; r++ {
		c.states = append(c.states, New(cache.New(capacity, r), nil))
		var coord *negotiate.Coordinator
		if r == 0 {
			coord = negotiate.New(n)
		}
		c.negs = append(c.negs, NewNegotiation(r, n, coord, nil))
	}
	return c
}

// submit enqueues a request on rank r.
func (c *cluster) submit(r int, req wire.Request) {
	req.Rank = int32(r)
	c.queues[r] = append(c.queues[r], req)
	c.bits[r] = append(c.bits[r], -1)
}

// performed is one rank's view of a cycle: the responses it performs, each
// as "TYPE name[+name...]" with "(zeros)" when this rank performs it without
// having submitted it (a joined rank's allreduce), or "!" + the error.
type performed []string

// step runs one cycle on every rank and returns what each performs. A rank
// asked to perform a response it cannot (not submitted, not an allreduce
// while joined) fails the test: that is the defect the runtime reported as
// "which this rank did not submit".
func (c *cluster) step(shutdown ...int) []performed {
	c.t.Helper()
	c.now = c.now.Add(time.Millisecond)
	items := make([][]Item, c.n)
	words := make([][]uint64, c.n)
	for r := 0; r < c.n; r++ {
		for i := range c.queues[r] {
			items[r] = append(items[r], Item{Req: &c.queues[r][i], Bit: c.bits[r][i]})
		}
		stop := false
		for _, s := range shutdown {
			stop = stop || s == r
		}
		words[r] = c.states[r].Begin(items[r], stop)
	}
	and := append([]uint64(nil), words[0]...)
	for r := 1; r < c.n; r++ {
		if len(words[r]) != len(and) {
			c.t.Fatalf("rank %d's vector has %d words, rank 0's %d", r, len(words[r]), len(and))
		}
		for i, w := range words[r] {
			and[i] &= w
		}
	}
	var inv [][]uint64
	for r := 0; r < c.n; r++ {
		copy(words[r], and)
		if w := c.states[r].Agreed(); w != nil {
			inv = append(inv, w)
		}
	}
	if len(inv) != 0 && len(inv) != c.n {
		c.t.Fatalf("%d of %d ranks asked for the invalid-bit OR", len(inv), c.n)
	}
	if len(inv) == c.n {
		or := make([]uint64, len(inv[0]))
		for _, w := range inv {
			for i := range w {
				or[i] |= w[i]
			}
		}
		for _, w := range inv {
			copy(w, or)
		}
	}
	ds := make([]*Decision, c.n)
	for r := 0; r < c.n; r++ {
		ds[r] = c.states[r].Decide(c.now)
	}
	if ds[0].Negotiate {
		negs := make([]*Negotiation, c.n)
		for r := 0; r < c.n; r++ {
			if !ds[r].Negotiate {
				c.t.Fatalf("rank %d does not negotiate, rank 0 does", r)
			}
			stop := false
			for _, s := range shutdown {
				stop = stop || s == r
			}
			negs[r] = c.negs[r]
			negs[r].Begin(items[r], ds[r].Uncached, stop)
		}
		if err := runSteps(c.now, negs); err != nil {
			c.t.Fatal(err)
		}
		for r := 0; r < c.n; r++ {
			c.states[r].Negotiated(negs[r].Responses())
		}
	}
	out := make([]performed, c.n)
	for r := 0; r < c.n; r++ {
		d := ds[r]
		if len(d.Items) != len(d.Responses) {
			c.t.Fatalf("rank %d: %d items for %d responses", r, len(d.Items), len(d.Responses))
		}
		if d.Shutdown != ds[0].Shutdown || d.AllJoined != ds[0].AllJoined || len(d.Responses) != len(ds[0].Responses) ||
			!slices.Equal(d.Bits, ds[0].Bits) {
			c.t.Fatalf("rank %d decided differently from rank 0: %+v vs %+v", r, d, ds[0])
		}
		// The cached responses come first, each with its bit (which
		// negotiation's entries may since have taken over).
		for k, bit := range d.Bits {
			if d.Negotiate {
				break
			}
			if got := c.states[r].Cache().Peek(bit).Names[0]; got != d.Responses[k].Names[0] {
				c.t.Fatalf("rank %d: response %d is %q, its bit %d holds %q", r, k, d.Responses[k].Names[0], bit, got)
			}
		}
		keep := make([]bool, len(items[r]))
		for _, i := range d.Back {
			keep[i] = true
		}
		taken := make(map[string]bool)
		for k, resp := range d.Responses {
			if i := d.Items[k]; i != None && items[r][i].Req.Name != resp.Names[0] {
				c.t.Fatalf("rank %d: response %q performs item %q", r, resp.Names[0], items[r][i].Req.Name)
			}
			if resp.Type == wire.Error {
				out[r] = append(out[r], "!"+resp.Error)
				for _, name := range resp.Names {
					taken[name] = true
				}
				continue
			}
			s := resp.Type.String() + " " + strings.Join(resp.Names, "+")
			for _, name := range resp.Names {
				mine := false
				for i := range items[r] {
					if items[r][i].Req.Name == name && !keep[i] && !taken[name] {
						mine = true
					}
				}
				if !mine {
					if !c.states[r].Joined() || !joinable(resp.Type) {
						c.t.Fatalf("rank %d: response %v for %q, which this rank did not submit", r, resp.Type, name)
					}
					s += "(zeros)"
				}
				taken[name] = true
			}
			if resp.Type == wire.ResponseType(wire.Join) {
				c.states[r].Unjoin()
			}
			out[r] = append(out[r], s)
		}
		// What was performed leaves the queue; the rest stays, in order.
		var q []wire.Request
		var b []int
		for i := range items[r] {
			if !taken[items[r][i].Req.Name] {
				q = append(q, c.queues[r][i])
				b = append(b, items[r][i].Bit)
			}
		}
		c.queues[r], c.bits[r] = q, b
	}
	return out
}

func allgather(name string, rows int64) wire.Request {
	return wire.Request{Type: wire.Allgather, DType: tensor.Float32, Name: name, Shape: []int64{rows}, Prescale: 1, Postscale: 1}
}

func allreduce(name string, n int64) wire.Request {
	return wire.Request{Type: wire.Allreduce, DType: tensor.Float32, Name: name, Shape: []int64{n}, Prescale: 1, Postscale: 1}
}

func join() wire.Request { return wire.Request{Type: wire.Join, Name: negotiate.JoinName} }

func want(t *testing.T, got []performed, r int, w ...string) {
	t.Helper()
	if fmt.Sprint([]string(got[r])) != fmt.Sprint(w) {
		t.Fatalf("rank %d performed %q, want %q", r, got[r], w)
	}
}

// TestJoinAfterCachedAllgather is a past defect: an
// allgather is cached, then every rank joins. When every rank has joined,
// no cached response may be replayed (nobody submitted it).
func TestJoinAfterCachedAllgather(t *testing.T) {
	for _, n := range []int{2, 3} {
		for _, capacity := range []int{1024, 1} {
			t.Run(fmt.Sprintf("np%d/cache%d", n, capacity), func(t *testing.T) {
				c := newCluster(t, n, capacity)
				for r := 0; r < n; r++ {
					c.submit(r, allgather("allgather.x", int64(r+1)))
				}
				got := c.step()
				for r := 0; r < n; r++ {
					want(t, got, r, "ALLGATHER allgather.x")
				}
				// Once more: the cached fast path.
				for r := 0; r < n; r++ {
					c.submit(r, allgather("allgather.x", int64(r+1)))
				}
				got = c.step()
				for r := 0; r < n; r++ {
					want(t, got, r, "ALLGATHER allgather.x")
				}
				for r := 0; r < n; r++ {
					c.submit(r, join())
				}
				got = c.step()
				for r := 0; r < n; r++ {
					want(t, got, r, "JOIN join.noname")
				}
				// Afterwards the cache still serves the allgather.
				for r := 0; r < n; r++ {
					c.submit(r, allgather("allgather.x", int64(r+1)))
				}
				got = c.step()
				for r := 0; r < n; r++ {
					want(t, got, r, "ALLGATHER allgather.x")
				}
			})
		}
	}
}

// TestJoinOneByOne joins the ranks in different cycles: a joined rank takes
// part in cached allreduces with zeros, and when the last rank joins no
// cached response is replayed.
func TestJoinOneByOne(t *testing.T) {
	c := newCluster(t, 3, 16)
	for r := 0; r < 3; r++ {
		c.submit(r, allreduce("allreduce.g", 4))
		c.submit(r, allgather("allgather.x", 2))
	}
	c.step()
	c.submit(0, join())
	c.submit(1, allreduce("allreduce.g", 4))
	c.submit(2, allreduce("allreduce.g", 4))
	got := c.step()
	// Rank 0's Join goes through negotiation; ranks 1 and 2's cached
	// allreduce completes with rank 0's zeros in the same cycle.
	want(t, got, 0, "ALLREDUCE allreduce.g(zeros)")
	want(t, got, 1, "ALLREDUCE allreduce.g")
	c.submit(1, join())
	c.submit(2, allreduce("allreduce.g", 4))
	got = c.step()
	want(t, got, 0, "ALLREDUCE allreduce.g(zeros)")
	want(t, got, 1, "ALLREDUCE allreduce.g(zeros)")
	want(t, got, 2, "ALLREDUCE allreduce.g")
	c.submit(2, join())
	got = c.step()
	for r := 0; r < 3; r++ {
		want(t, got, r, "JOIN join.noname")
	}
}

// TestCachedAllgatherWhileJoined: a rank submits a cached allgather while
// another has joined. The joined rank cannot take part: the entry is erased
// everywhere and negotiation answers with Horovod's error, on every rank.
func TestCachedAllgatherWhileJoined(t *testing.T) {
	c := newCluster(t, 2, 16)
	for r := 0; r < 2; r++ {
		c.submit(r, allgather("allgather.x", 2))
	}
	c.step()
	c.submit(1, join())
	c.submit(0, allgather("allgather.x", 2))
	got := c.step()
	want(t, got, 0) // pushed back: the bit was erased
	want(t, got, 1)
	got = c.step()
	msg := "!Allgather is not supported with Join at this time. Specify sparse_to_dense=True if using DistributedOptimizer"
	want(t, got, 0, msg)
	want(t, got, 1, msg)
	c.submit(0, join())
	got = c.step()
	want(t, got, 0, "JOIN join.noname")
	want(t, got, 1, "JOIN join.noname")
}

// TestSmallCacheEvictions runs many names through a cache of capacity 2 at
// 3 ranks, with ranks submitting in different orders: every cycle's
// decisions agree and every request is performed exactly once.
func TestSmallCacheEvictions(t *testing.T) {
	const n = 3
	c := newCluster(t, n, 2)
	names := []string{"a", "b", "c", "d", "e"}
	counts := make([]map[string]int, n)
	for r := range counts {
		counts[r] = make(map[string]int)
	}
	for round := 0; round < 6; round++ {
		for r := 0; r < n; r++ {
			for k := range names {
				j := (k + r + round) % len(names)
				c.submit(r, allreduce("allreduce."+names[j], int64(1+j)))
			}
		}
		for i := 0; i < 20; i++ {
			empty := true
			for r := 0; r < n; r++ {
				empty = empty && len(c.queues[r]) == 0
			}
			if empty {
				break
			}
			for r, p := range c.step() {
				for _, s := range p {
					for _, name := range strings.Split(strings.TrimPrefix(s, "ALLREDUCE "), "+") {
						counts[r][name]++
					}
				}
			}
		}
	}
	for r := 0; r < n; r++ {
		if len(c.queues[r]) != 0 {
			t.Fatalf("rank %d still has %d requests", r, len(c.queues[r]))
		}
		for _, name := range names {
			if got := counts[r]["allreduce."+name]; got != 6 {
				t.Fatalf("rank %d performed %s %d times, want 6", r, name, got)
			}
		}
	}
}

// TestShutdownAgreed: one rank's shutdown request reaches every rank's
// decision in the same cycle, on the fast path and the slow one.
func TestShutdownAgreed(t *testing.T) {
	c := newCluster(t, 3, 16)
	c.step(1)
	for r := 0; r < 3; r++ {
		if !c.states[r].d.Shutdown {
			t.Fatalf("rank %d did not see the shutdown", r)
		}
	}
	c = newCluster(t, 2, 16)
	c.submit(0, allreduce("allreduce.a", 1))
	c.step(0)
	for r := 0; r < 2; r++ {
		if !c.states[r].d.Shutdown || !c.states[r].d.Negotiate {
			t.Fatalf("rank %d: %+v", r, c.states[r].d)
		}
	}
}

// TestStaleCachedGoesToNegotiation: a cached request that waits longer
// than the stall warning time is forced through negotiation, where the
// coordinator can see it.
func TestStaleCachedGoesToNegotiation(t *testing.T) {
	ins, _ := stall.New(stall.Config{Warn: 10 * time.Millisecond})
	c := newCluster(t, 2, 16)
	c.states[0] = New(cache.New(16, 0), ins)
	for r := 0; r < 2; r++ {
		c.submit(r, allreduce("allreduce.a", 1))
	}
	c.step()
	c.submit(0, allreduce("allreduce.a", 1))
	c.step() // rank 1 has not submitted: back to the queue, observed
	if d := c.states[0].d; len(d.Back) != 1 || d.Negotiate {
		t.Fatalf("decision %+v", d)
	}
	c.now = c.now.Add(time.Second)
	c.states[0].StaleCached(c.now)
	c.step()
	if d := c.states[0].d; !d.Negotiate || len(d.Uncached) != 1 {
		t.Fatalf("stale cached request not negotiated: %+v", d)
	}
	if p := c.negs[0].coord.Pending(); len(p["allreduce.a"]) != 1 || p["allreduce.a"][0] != 0 {
		t.Fatalf("coordinator pending %v", p)
	}
}

// TestSetCache: the autotuner switches the response cache off and on
// between cycles, on every rank at the same cycle. With it off every
// request is negotiated; switched on again it starts empty, fills and is
// hit; the results are the same throughout.
func TestSetCache(t *testing.T) {
	const n = 3
	c := newCluster(t, n, 16)
	round := func(wantNegotiate bool) {
		t.Helper()
		for r := range n {
			c.submit(r, allreduce("allreduce.w", 8))
		}
		got := c.step()
		for r := range n {
			want(t, got, r, "ALLREDUCE allreduce.w")
			if c.states[r].d.Negotiate != wantNegotiate {
				t.Fatalf("rank %d negotiated %v, want %v", r, c.states[r].d.Negotiate, wantNegotiate)
			}
		}
	}
	round(true)  // cached now
	round(false) // a hit
	for r := range n {
		c.states[r].Invalidate("allreduce.w") // forgotten with the cache
		c.states[r].SetCache(cache.New(0, r))
	}
	round(true)
	round(true) // off: never cached
	for r := range n {
		if c.states[r].Cache().Len() != 0 || len(c.states[r].invalid) != 0 {
			t.Fatalf("rank %d: the switched-off cache holds %d entries, %d invalidations", r, c.states[r].Cache().Len(), len(c.states[r].invalid))
		}
		c.states[r].SetCache(cache.New(16, r))
	}
	round(true) // on again, empty
	round(false)
}
