package commtest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// Cases returns the conformance cases, in the order every rank runs them.
func Cases() []Case {
	var cs []Case
	for _, dt := range tensor.DTypes() {
		for _, op := range tensor.ReduceOps() {
			if op.Supports(dt) {
				cs = append(cs, allreduceCase(dt, op))
			}
		}
	}
	cs = append(cs,
		largeAllreduceCase(tensor.Float32, tensor.Sum, 1<<18+3),
		largeAllreduceCase(tensor.Float16, tensor.Sum, 100_003),
		largeAllreduceCase(tensor.Int64, tensor.Max, 50_001),
		largeAllreduceCase(tensor.Uint8, tensor.BitOr, 200_003),
	)
	for _, dt := range tensor.DTypes() {
		cs = append(cs, allgathervCase("allgatherv/ragged/"+dt.String(), dt, func(r, n int) int { return r + 1 }))
	}
	cs = append(cs,
		allgathervCase("allgatherv/one-rank-empty", tensor.Float32, func(r, n int) int {
			if r == 1%n {
				return 0
			}
			return r + 1
		}),
		allgathervCase("allgatherv/all-empty", tensor.Int8, func(r, n int) int { return 0 }),
		gathervCase(),
		bcastCase(),
		bcastDTypesCase(),
		alltoallvCase("alltoallv/uneven", func(s, d int) int { return (s + 2*d) % 3 }),
		alltoallvCase("alltoallv/self-only", func(s, d int) int {
			if s == d {
				return 2
			}
			return 0
		}),
		alltoallvCase("alltoallv/all-empty", func(s, d int) int { return 0 }),
		reduceScatterCase("reducescatter/uneven", func(r int) int { return r + 1 }),
		reduceScatterCase("reducescatter/rank0-empty", func(r int) int {
			if r == 0 {
				return 0
			}
			return 2*r + 1
		}),
		Case{Name: "barrier", Run: barrier},
		splitCase("split/parity", func(r, n int) (int, int) { return r % 2, r }),
		splitCase("split/reverse-keys", func(r, n int) (int, int) { return 0, -r }),
		splitCase("split/tied-keys", func(r, n int) (int, int) {
			c := 0
			if r%3 == 1 {
				c = 1
			}
			return c, (n - r) / 2
		}),
		splitCase("split/singletons", func(r, n int) (int, int) { return r, 0 }),
		Case{Name: "split/negative-color-opts-out", MinRanks: 2, Run: splitOptOut},
		Case{Name: "splitlocal", Run: splitLocal},
	)
	cs = append(cs, exchangeCases()...)
	cs = append(cs, errorCases()...)
	return append(cs, faultCases()...)
}

func allreduceCase(dt tensor.DType, op tensor.ReduceOp) Case {
	return Case{
		Name: fmt.Sprintf("allreduce/%v/%s", dt, strings.ToLower(op.String())),
		Run: func(c comm.Communicator) error {
			var rep report
			for _, shape := range [][]int{{1}, {13}, {2, 3, 5}, {0}, {0, 4}} {
				allreduceOnce(&rep, c, dt, op, shape...)
			}
			return rep.err()
		},
	}
}

func largeAllreduceCase(dt tensor.DType, op tensor.ReduceOp, n int) Case {
	return Case{
		Name: fmt.Sprintf("allreduce/large/%v/%s", dt, strings.ToLower(op.String())),
		Run: func(c comm.Communicator) error {
			var rep report
			allreduceOnce(&rep, c, dt, op, n)
			// Twice, to catch state left behind by the first call.
			allreduceOnce(&rep, c, dt, op, n)
			return rep.err()
		},
	}
}

func allreduceOnce(rep *report, c comm.Communicator, dt tensor.DType, op tensor.ReduceOp, shape ...int) {
	r, n := c.Rank(), c.Size()
	buf := filled(dt, func(i int) int64 { return contribution(dt, op, r, n, i) }, shape...)
	want := filled(dt, func(i int) int64 { return combine(dt, op, n, i) }, shape...)
	what := fmt.Sprintf("allreduce %v of %v %v", op, dt, tensor.Shape(shape))
	if err := c.Allreduce(buf, op); err != nil {
		rep.ok(what, err)
		return
	}
	rep.check(same(what, buf, want))
	if !buf.Shape().Equal(shape) {
		rep.errorf("%s: shape became %v", what, buf.Shape())
	}
}

// padded returns a tensor of n+1 elements: the first n are f(i), the last
// is the sentinel (which the collective must leave alone).
func padded(dt tensor.DType, n int, f func(i int) int64) *tensor.Tensor {
	return filled(dt, func(i int) int64 {
		if i == n {
			return sentinel
		}
		return f(i)
	}, n+1)
}

func sentinels(dt tensor.DType, n int) *tensor.Tensor {
	return filled(dt, func(int) int64 { return sentinel }, n)
}

// allgathervCase: rank r sends rows(r, n) rows of 3 elements.
func allgathervCase(name string, dt tensor.DType, rows func(r, n int) int) Case {
	return Case{Name: name, Run: func(c comm.Communicator) error {
		r, n := c.Rank(), c.Size()
		const width = 3
		counts := make([]int, n)
		for q := range counts {
			counts[q] = rows(q, n) * width
		}
		send := filled(dt, func(i int) int64 { return tag(dt, r, i) }, rows(r, n), width)
		recv := sentinels(dt, comm.Sum(counts)+1)
		var rep report
		rep.ok("allgatherv", c.Allgatherv(send, recv, counts))
		off := comm.Offsets(counts)
		want := padded(dt, comm.Sum(counts), func(i int) int64 {
			q := owner(off, counts, i)
			return tag(dt, q, i-off[q])
		})
		rep.check(same(fmt.Sprintf("allgatherv of %v with counts %v", dt, counts), recv, want))
		return rep.err()
	}}
}

// owner returns the block that element i falls in.
func owner(off, counts []int, i int) int {
	for q := range off {
		if i >= off[q] && i < off[q]+counts[q] {
			return q
		}
	}
	panic("commtest: element outside every block")
}

// gathervCase gathers to every root in turn, with a rank that sends
// nothing, a different dtype per root, and receive buffers away from the
// root that are nil or must stay untouched.
func gathervCase() Case {
	return Case{Name: "gatherv/every-root", Run: func(c comm.Communicator) error {
		r, n := c.Rank(), c.Size()
		var rep report
		counts := make([]int, n)
		for q := range counts {
			counts[q] = (q + 1) % 3 * 2
		}
		total := comm.Sum(counts)
		off := comm.Offsets(counts)
		for root := range n {
			dt := tensor.DTypes()[root%len(tensor.DTypes())]
			send := filled(dt, func(i int) int64 { return tag(dt, r+root, i) }, counts[r])
			var recv *tensor.Tensor
			if r == root || r%2 == 0 {
				recv = sentinels(dt, total+1)
			}
			what := fmt.Sprintf("gatherv of %v to root %d, counts %v", dt, root, counts)
			rep.ok(what, c.Gatherv(send, recv, counts, root))
			switch {
			case r == root:
				rep.check(same(what, recv, padded(dt, total, func(i int) int64 {
					q := owner(off, counts, i)
					return tag(dt, q+root, i-off[q])
				})))
			case recv != nil:
				rep.check(same(what+" (receive buffer away from the root)", recv, sentinels(dt, total+1)))
			}
		}
		return rep.err()
	}}
}

// bcastCase broadcasts from every root in turn, a different dtype per root.
func bcastCase() Case {
	return Case{Name: "bcast/every-root", Run: func(c comm.Communicator) error {
		r, n := c.Rank(), c.Size()
		var rep report
		for root := range n {
			dt := tensor.DTypes()[(root+3)%len(tensor.DTypes())]
			for _, shape := range [][]int{{13}, {2, 2}, {1}, {0}} {
				buf := sentinels(dt, tensor.Shape(shape).NumElements())
				if r == root {
					fill(buf, func(i int) int64 { return tag(dt, root, i) })
				}
				buf, _ = buf.Reshape(shape...)
				what := fmt.Sprintf("bcast of %v %v from root %d", dt, tensor.Shape(shape), root)
				if err := c.Bcast(buf, root); err != nil {
					rep.ok(what, err)
					continue
				}
				rep.check(same(what, buf, filled(dt, func(i int) int64 { return tag(dt, root, i) }, shape...)))
			}
		}
		return rep.err()
	}}
}

// bcastDTypesCase broadcasts every dtype from the last rank.
func bcastDTypesCase() Case {
	return Case{Name: "bcast/every-dtype", Run: func(c comm.Communicator) error {
		r, n := c.Rank(), c.Size()
		root := n - 1
		var rep report
		for _, dt := range tensor.DTypes() {
			buf := sentinels(dt, 7)
			if r == root {
				fill(buf, func(i int) int64 { return tag(dt, root, i) })
			}
			what := fmt.Sprintf("bcast of %v from root %d", dt, root)
			if err := c.Bcast(buf, root); err != nil {
				rep.ok(what, err)
				continue
			}
			rep.check(same(what, buf, filled(dt, func(i int) int64 { return tag(dt, root, i) }, 7)))
		}
		return rep.err()
	}}
}

// alltoallvCase: rank s sends count(s, d) elements to rank d.
func alltoallvCase(name string, count func(s, d int) int) Case {
	return Case{Name: name, Run: func(c comm.Communicator) error {
		r, n := c.Rank(), c.Size()
		var rep report
		sendCounts, recvCounts := make([]int, n), make([]int, n)
		for q := range n {
			sendCounts[q] = count(r, q)
			recvCounts[q] = count(q, r)
		}
		sendOff, recvOff := comm.Offsets(sendCounts), comm.Offsets(recvCounts)
		// Element j of the block that s sends to d.
		val := func(dt tensor.DType, s, d, j int) int64 { return tag(dt, s*8+d, j) }
		for _, dt := range []tensor.DType{tensor.Float32, tensor.Int64, tensor.BFloat16, tensor.Uint8, tensor.Int16, tensor.Uint16, tensor.Bool} {
			send := filled(dt, func(i int) int64 {
				d := owner(sendOff, sendCounts, i)
				return val(dt, r, d, i-sendOff[d])
			}, comm.Sum(sendCounts))
			before := send.Clone()
			recv := sentinels(dt, comm.Sum(recvCounts)+1)
			what := fmt.Sprintf("alltoallv of %v, send counts %v, receive counts %v", dt, sendCounts, recvCounts)
			rep.ok(what, c.Alltoallv(send, sendCounts, recv, recvCounts))
			rep.check(same(what, recv, padded(dt, comm.Sum(recvCounts), func(i int) int64 {
				s := owner(recvOff, recvCounts, i)
				return val(dt, s, r, i-recvOff[s])
			})))
			rep.check(same(what+" (send buffer)", send, before))
		}
		return rep.err()
	}}
}

// reduceScatterCase: rank r receives count(r) elements.
func reduceScatterCase(name string, count func(r int) int) Case {
	return Case{Name: name, Run: func(c comm.Communicator) error {
		r, n := c.Rank(), c.Size()
		var rep report
		counts := make([]int, n)
		for q := range counts {
			counts[q] = count(q)
		}
		off := comm.Offsets(counts)
		for _, dop := range []struct {
			dt tensor.DType
			op tensor.ReduceOp
		}{
			{tensor.Float32, tensor.Sum}, {tensor.Int32, tensor.Max}, {tensor.Float16, tensor.Sum},
			{tensor.Uint8, tensor.Min}, {tensor.Int64, tensor.Product}, {tensor.Uint64, tensor.BitOr},
			{tensor.Int16, tensor.Sum}, {tensor.Uint16, tensor.Max}, {tensor.Bool, tensor.Sum}, {tensor.Bool, tensor.Min},
		} {
			dt, op := dop.dt, dop.op
			send := filled(dt, func(i int) int64 { return contribution(dt, op, r, n, i) }, comm.Sum(counts))
			recv := sentinels(dt, counts[r]+1)
			what := fmt.Sprintf("reducescatter %v of %v, counts %v", op, dt, counts)
			rep.ok(what, c.ReduceScatter(send, recv, counts, op))
			rep.check(same(what, recv, padded(dt, counts[r], func(i int) int64 { return combine(dt, op, n, off[r]+i) })))
		}
		return rep.err()
	}}
}

func barrier(c comm.Communicator) error {
	var rep report
	for i := range 3 {
		rep.ok(fmt.Sprintf("barrier %d", i), c.Barrier())
	}
	return rep.err()
}

// allOK tells every rank whether every rank's ok is true (false also when
// the agreement itself fails).
func allOK(c comm.Communicator, ok bool) bool {
	v := []int32{0}
	if ok {
		v[0] = 1
	}
	if err := c.Allreduce(tensor.FromInt32(v), tensor.Min); err != nil {
		return false
	}
	return v[0] == 1
}

// members gathers the parent ranks of sub's members, in sub's rank order.
func members(c comm.Communicator, sub comm.Communicator, rep *report, what string) []int {
	counts := make([]int, sub.Size())
	for i := range counts {
		counts[i] = 1
	}
	got := make([]int64, sub.Size())
	err := sub.Allgatherv(tensor.FromInt64([]int64{int64(c.Rank())}), tensor.FromInt64(got), counts)
	rep.ok(what+": allgatherv in the new group", err)
	out := make([]int, len(got))
	for i, v := range got {
		out[i] = int(v)
	}
	return out
}

// splitCase splits by f(rank, size) = (color, key) and checks the new
// groups: size, rank, member order (by key, then rank), a working
// allreduce; then closes them and checks the parent still works.
func splitCase(name string, f func(r, n int) (color, key int)) Case {
	return Case{Name: name, Run: func(c comm.Communicator) error {
		r, n := c.Rank(), c.Size()
		var rep report
		color, key := f(r, n)
		var want []int
		for q := range n {
			if cq, _ := f(q, n); cq == color {
				want = append(want, q)
			}
		}
		slices.SortStableFunc(want, func(a, b int) int {
			_, ka := f(a, n)
			_, kb := f(b, n)
			return ka - kb
		})
		what := fmt.Sprintf("split(color %d, key %d)", color, key)
		sub, err := c.Split(color, key)
		rep.ok(what, err)
		if allOK(c, err == nil && sub != nil) {
			if sub.Size() != len(want) || sub.Rank() != slices.Index(want, r) {
				rep.errorf("%s: rank %d of %d, want rank %d of %d (members %v)", what, sub.Rank(), sub.Size(), slices.Index(want, r), len(want), want)
			}
			if got := members(c, sub, &rep, what); !slices.Equal(got, want) {
				rep.errorf("%s: members %v in rank order, want %v", what, got, want)
			}
			v := []int64{int64(r) + 1}
			rep.ok(what+": allreduce in the new group", sub.Allreduce(tensor.FromInt64(v), tensor.Sum))
			var sum int64
			for _, q := range want {
				sum += int64(q) + 1
			}
			if v[0] != sum {
				rep.errorf("%s: allreduce in the new group gave %d, want %d", what, v[0], sum)
			}
			rep.ok(what+": barrier in the new group", sub.Barrier())
			rep.ok(what+": close", sub.Close())
		} else {
			rep.errorf("%s: failed on some rank", what)
		}
		alive(&rep, c, "after "+what)
		return rep.err()
	}}
}

// splitOptOut: rank 0 passes a negative color and must get an error and no
// group; the other ranks must get one group of everyone else.
func splitOptOut(c comm.Communicator) error {
	r, n := c.Rank(), c.Size()
	var rep report
	color := 0
	if r == 0 {
		color = -1
	}
	sub, err := c.Split(color, r)
	switch {
	case r == 0 && err == nil:
		rep.errorf("split with a negative color returned no error")
	case r != 0 && err != nil:
		rep.ok("split while rank 0 opts out", err)
	}
	inGroup := r != 0 && err == nil && sub != nil
	if allOK(c, r == 0 || inGroup) && inGroup {
		want := make([]int, 0, n-1)
		for q := 1; q < n; q++ {
			want = append(want, q)
		}
		if got := members(c, sub, &rep, "split while rank 0 opts out"); !slices.Equal(got, want) {
			rep.errorf("split while rank 0 opts out: members %v, want %v", got, want)
		}
		rep.ok("close", sub.Close())
	}
	alive(&rep, c, "after a split with a negative color")
	return rep.err()
}

// splitLocal checks that SplitLocal partitions the group consistently:
// members in rank order, and every member of a local group agreeing on who
// is in it.
func splitLocal(c comm.Communicator) error {
	r, n := c.Rank(), c.Size()
	var rep report
	loc, err := c.SplitLocal()
	rep.ok("splitlocal", err)
	if !allOK(c, err == nil && loc != nil) {
		rep.errorf("splitlocal failed on some rank")
		alive(&rep, c, "after splitlocal")
		return rep.err()
	}
	mine := members(c, loc, &rep, "splitlocal")
	if !slices.IsSorted(mine) || loc.Rank() >= len(mine) || mine[loc.Rank()] != r {
		rep.errorf("splitlocal: local rank %d, members %v: want the members in rank order, this rank (%d) at its local rank", loc.Rank(), mine, r)
	}
	// Name each node by its lowest rank; every rank publishes (node, local
	// size) and checks that the ranks naming its node are its members.
	counts := make([]int, n)
	for i := range counts {
		counts[i] = 2
	}
	all := make([]int64, 2*n)
	node := int64(-1)
	if len(mine) > 0 {
		node = int64(mine[0])
	}
	rep.ok("splitlocal: allgatherv of node names", c.Allgatherv(tensor.FromInt64([]int64{node, int64(loc.Size())}), tensor.FromInt64(all), counts))
	var same []int
	for q := range n {
		if all[2*q] == node {
			same = append(same, q)
			if int(all[2*q+1]) != loc.Size() {
				rep.errorf("splitlocal: rank %d says its node has %d ranks, this rank says %d", q, all[2*q+1], loc.Size())
			}
		}
	}
	if !slices.Equal(same, mine) {
		rep.errorf("splitlocal: ranks %v name node %d, but its local group is %v", same, node, mine)
	}
	rep.ok("splitlocal: close", loc.Close())
	alive(&rep, c, "after splitlocal")
	return rep.err()
}

// alive checks that c still performs a correct allreduce.
func alive(rep *report, c comm.Communicator, when string) {
	r, n := c.Rank(), c.Size()
	v := []int32{int32(r) + 1, 1}
	what := "allreduce " + when
	if err := c.Allreduce(tensor.FromInt32(v), tensor.Sum); err != nil {
		rep.ok(what, err)
		return
	}
	if want := []int32{int32(n * (n + 1) / 2), int32(n)}; !slices.Equal(v, want) {
		rep.errorf("%s: got %v, want %v", what, v, want)
	}
}
