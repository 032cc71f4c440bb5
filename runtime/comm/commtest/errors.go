package commtest

import (
	"errors"
	"fmt"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// errorCase is a collective called with arguments that are wrong on some
// rank, or that disagree across ranks. call passes the buffers of the
// collective to keep before making it, and returns its error. Every rank
// must get an error, no kept buffer may change, and an allreduce afterwards
// must still work.
type errorCase struct {
	name     string
	minRanks int
	call     func(c comm.Communicator, keep func(...*tensor.Tensor)) error
	// mismatch, for arguments that disagree across ranks, is what every
	// rank's *comm.MismatchError must say (its Detail), in a group of n
	// ranks: internal/agree's words, the same on every transport.
	mismatch func(n int) string
	// own, for arguments that one rank alone gets wrong, is that rank and
	// the text of its own error in a group of n ranks: the others get a
	// *comm.MismatchError that says "rank <rank>: <text>", on every
	// transport.
	own func(n int) (rank int, text string)
}

func (e errorCase) toCase() Case {
	return Case{Name: "error/" + e.name, MinRanks: e.minRanks, Run: func(c comm.Communicator) error {
		var rep report
		var bufs, before []*tensor.Tensor
		err := e.call(c, func(ts ...*tensor.Tensor) {
			for _, t := range ts {
				bufs = append(bufs, t)
				before = append(before, t.Clone())
			}
		})
		rep.fails(e.name, err)
		if e.mismatch != nil {
			rep.check(mismatchSays(e.name, err, e.mismatch(c.Size())))
		}
		if e.own != nil {
			rep.check(ownSays(e.name, err, c.Rank(), c.Size(), e.own))
		}
		for i, b := range bufs {
			rep.check(same(fmt.Sprintf("%s: buffer %d after the failed call", e.name, i), b, before[i]))
		}
		alive(&rep, c, "after "+e.name)
		return rep.err()
	}}
}

// mismatchSays checks that err is a *comm.MismatchError whose Detail is
// detail.
func mismatchSays(name string, err error, detail string) error {
	var mm *comm.MismatchError
	if !errors.As(err, &mm) {
		return fmt.Errorf("%s: %v, want a *comm.MismatchError", name, err)
	}
	if mm.Detail != detail {
		return fmt.Errorf("%s: the mismatch says %q, want %q (internal/agree's words, as on every transport)", name, mm.Detail, detail)
	}
	return nil
}

// ownSays checks the error of a case in which one rank alone has its
// arguments wrong: that rank's own error says what, and every other rank's
// *comm.MismatchError names that rank and says the same.
func ownSays(name string, err error, rank, n int, own func(n int) (int, string)) error {
	bad, text := own(n)
	if rank != bad {
		return mismatchSays(name, err, fmt.Sprintf("rank %d: %s", bad, text))
	}
	if err == nil || err.Error() != text {
		return fmt.Errorf("%s: this rank's own error is %v, want %q (as on every transport)", name, err, text)
	}
	return nil
}

// countsDetail is agree.Disagreement's text for counts a on rank 0 and b
// on rank r.
func countsDetail(a, b []int, r int) string {
	return fmt.Sprintf("counts %v (rank 0) and %v (rank %d)", a, b, r)
}

func ones(n int) []int {
	c := make([]int, n)
	for i := range c {
		c[i] = 1
	}
	return c
}

func ranked(dt tensor.DType, r, n int) *tensor.Tensor {
	return filled(dt, func(i int) int64 { return tag(dt, r, i) }, n)
}

func errorCases() []Case {
	es := append(reductionErrorCases(), gatherErrorCases()...)
	es = append(es, scatterErrorCases()...)
	es = append(es, exchangeErrorCases()...)
	cs := make([]Case, len(es))
	for i, e := range es {
		cs[i] = e.toCase()
	}
	return cs
}

// last reports whether c is the last rank of its group.
func last(c comm.Communicator) bool { return c.Rank() == c.Size()-1 }

// reductionErrorCases are the error cases of allreduce, bcast and
// gatherv's root and counts.
func reductionErrorCases() []errorCase {
	return []errorCase{
		{"allreduce/lengths-differ", 2, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			n := 4
			if last(c) {
				n = 5
			}
			buf := ranked(tensor.Float32, c.Rank(), n)
			keep(buf)
			return c.Allreduce(buf, tensor.Sum)
		}, func(n int) string { return fmt.Sprintf("element counts 4 (rank 0) and 5 (rank %d)", n-1) }, nil},
		{"allreduce/dtypes-differ", 2, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			dt := tensor.Float32
			if c.Rank() == 0 {
				dt = tensor.Float64
			}
			buf := ranked(dt, c.Rank(), 4)
			keep(buf)
			return c.Allreduce(buf, tensor.Sum)
		}, func(int) string { return "dtypes float64 (rank 0) and float32 (rank 1)" }, nil},
		{"allreduce/ops-differ", 2, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			op := tensor.Sum
			if c.Rank() == 0 {
				op = tensor.Max
			}
			buf := ranked(tensor.Int32, c.Rank(), 4)
			keep(buf)
			return c.Allreduce(buf, op)
		}, func(int) string { return "reductions Max (rank 0) and Sum (rank 1)" }, nil},
		{"allreduce/op-undefined-on-dtype", 1, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			buf := ranked(tensor.Float32, c.Rank(), 4)
			keep(buf)
			return c.Allreduce(buf, tensor.BitAnd)
		}, nil, nil},
		{"bcast/lengths-differ", 2, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			n := 6
			if last(c) {
				n = 7
			}
			buf := ranked(tensor.Int64, c.Rank(), n)
			keep(buf)
			return c.Bcast(buf, 0)
		}, func(n int) string { return fmt.Sprintf("element counts 6 (rank 0) and 7 (rank %d)", n-1) }, nil},
		{"bcast/roots-differ", 2, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			root := 1
			if c.Rank() == 0 {
				root = 0
			}
			buf := ranked(tensor.Int64, c.Rank(), 6)
			keep(buf)
			return c.Bcast(buf, root)
		}, func(int) string { return "roots 0 (rank 0) and 1 (rank 1)" }, nil},
		{"bcast/root-out-of-range", 1, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			buf := ranked(tensor.Int64, c.Rank(), 6)
			keep(buf)
			return c.Bcast(buf, c.Size())
		}, nil, nil},
		{"gatherv/negative-root", 1, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			send := ranked(tensor.Float64, c.Rank(), 1)
			recv := sentinels(tensor.Float64, c.Size())
			keep(send, recv)
			return c.Gatherv(send, recv, ones(c.Size()), -1)
		}, nil, nil},
		{"gatherv/negative-count", 1, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			counts := ones(c.Size())
			counts[0] = -1
			send := ranked(tensor.Float64, c.Rank(), max(counts[c.Rank()], 0))
			recv := sentinels(tensor.Float64, c.Size())
			keep(send, recv)
			return c.Gatherv(send, recv, counts, 0)
		}, nil, nil},
	}
}

// gatherErrorCases are the error cases of allgatherv.
func gatherErrorCases() []errorCase {
	return []errorCase{
		{"allgatherv/counts-differ", 2, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			counts := ones(c.Size())
			if c.Rank() == 0 {
				counts[c.Size()-1] = 2 // rank 0 expects one element more from the last rank
			}
			send := ranked(tensor.Float32, c.Rank(), counts[c.Rank()])
			recv := sentinels(tensor.Float32, comm.Sum(counts))
			keep(send, recv)
			return c.Allgatherv(send, recv, counts)
		}, func(n int) string {
			c0 := ones(n)
			c0[n-1] = 2
			return countsDetail(c0, ones(n), 1)
		}, nil},
		{"allgatherv/counts-length-everywhere", 1, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			counts := ones(c.Size() + 1)
			send := ranked(tensor.Float32, c.Rank(), 1)
			recv := sentinels(tensor.Float32, c.Size()+1)
			keep(send, recv)
			return c.Allgatherv(send, recv, counts)
		}, nil, nil},
		{"allgatherv/counts-length-one-rank", 2, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			counts := ones(c.Size())
			if last(c) {
				counts = ones(c.Size() + 1)
			}
			send := ranked(tensor.Float32, c.Rank(), 1)
			recv := sentinels(tensor.Float32, len(counts))
			keep(send, recv)
			return c.Allgatherv(send, recv, counts)
		}, nil, nil},
		{"allgatherv/send-size", 1, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			n := 1
			if last(c) {
				n = 2
			}
			send := ranked(tensor.Uint8, c.Rank(), n)
			recv := sentinels(tensor.Uint8, c.Size()+1)
			keep(send, recv)
			return c.Allgatherv(send, recv, ones(c.Size()))
		}, nil, func(n int) (int, string) { return n - 1, "comm: allgatherv: send buffer holds 2 elements, want 1" }},
		{"allgatherv/receive-too-small", 1, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			send := ranked(tensor.Uint8, c.Rank(), 1)
			m := c.Size()
			if last(c) {
				m--
			}
			recv := sentinels(tensor.Uint8, m)
			keep(send, recv)
			return c.Allgatherv(send, recv, ones(c.Size()))
		}, nil, func(n int) (int, string) {
			return n - 1, fmt.Sprintf("comm: allgatherv: receive buffer holds %d elements, want at least %d", n-1, n)
		}},
	}
}

// scatterErrorCases are the error cases of alltoallv and reducescatter.
func scatterErrorCases() []errorCase {
	return []errorCase{
		{"alltoallv/counts-differ", 2, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			sendCounts, recvCounts := ones(c.Size()), ones(c.Size())
			if c.Rank() == 1 {
				recvCounts[0] = 2 // rank 0 sends rank 1 one element
			}
			send := ranked(tensor.Int32, c.Rank(), comm.Sum(sendCounts))
			recv := sentinels(tensor.Int32, comm.Sum(recvCounts))
			keep(send, recv)
			return c.Alltoallv(send, sendCounts, recv, recvCounts)
		}, func(int) string { return "rank 0 sends 1 elements to rank 1, which expects 2" }, nil},
		{"alltoallv/send-size", 1, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			n := c.Size()
			if last(c) {
				n++
			}
			send := ranked(tensor.Int32, c.Rank(), n)
			recv := sentinels(tensor.Int32, c.Size())
			keep(send, recv)
			return c.Alltoallv(send, ones(c.Size()), recv, ones(c.Size()))
		}, nil, func(n int) (int, string) {
			return n - 1, fmt.Sprintf("comm: alltoallv: send buffer holds %d elements, want %d", n+1, n)
		}},
		{"reducescatter/counts-differ", 2, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			counts := ones(c.Size())
			if c.Rank() == 0 {
				counts[0] = 2
			}
			send := ranked(tensor.Float64, c.Rank(), comm.Sum(counts))
			recv := sentinels(tensor.Float64, counts[c.Rank()])
			keep(send, recv)
			return c.ReduceScatter(send, recv, counts, tensor.Sum)
		}, func(n int) string {
			c0 := ones(n)
			c0[0] = 2
			return countsDetail(c0, ones(n), 1)
		}, nil},
		{"reducescatter/ops-differ", 2, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			op := tensor.Min
			if c.Rank() == 0 {
				op = tensor.Sum
			}
			send := ranked(tensor.Float64, c.Rank(), c.Size())
			recv := sentinels(tensor.Float64, 1)
			keep(send, recv)
			return c.ReduceScatter(send, recv, ones(c.Size()), op)
		}, func(int) string { return "reductions Sum (rank 0) and Min (rank 1)" }, nil},
		{"reducescatter/send-size", 1, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			n := c.Size()
			if last(c) {
				n++
			}
			send := ranked(tensor.Float64, c.Rank(), n)
			recv := sentinels(tensor.Float64, 1)
			keep(send, recv)
			return c.ReduceScatter(send, recv, ones(c.Size()), tensor.Sum)
		}, nil, func(n int) (int, string) {
			return n - 1, fmt.Sprintf("comm: reducescatter: send buffer holds %d elements, want %d", n+1, n)
		}},
	}
}
