package commtest

import (
	"fmt"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// pairing says, for rank r of n, to whom it sends and from whom it
// receives (comm.NoPeer for none) in one exchange.
type pairing func(r, n int) (dest, source int)

// size is the number of elements rank s sends in an exchange case.
type sizing func(s int) int

// exchangeCases check comm.Exchange: pairwise swaps, ring shifts, a rank
// exchanging with itself, ranks that take no part, empty and odd-sized
// buffers, in several dtypes; then arguments that are wrong or disagree,
// which must fail on every rank; then a peer that aborts.
func exchangeCases() []Case {
	swap := func(r, n int) (int, int) {
		p := r ^ 1
		if p >= n {
			p = r // the odd one out exchanges with itself
		}
		return p, p
	}
	ring := func(r, n int) (int, int) { return (r + 1) % n, (r + n - 1) % n }
	self := func(r, n int) (int, int) { return r, r }
	oneWay := func(r, n int) (int, int) { // rank 0 sends to the last rank, nobody else sends
		dest, source := comm.NoPeer, comm.NoPeer
		if r == 0 {
			dest = n - 1
		}
		if r == n-1 {
			source = 0
		}
		return dest, source
	}
	odd := func(s int) int { return 2*s + 3 }
	return []Case{
		exchangeCase("exchange/pairs", swap, odd),
		exchangeCase("exchange/ring", ring, odd),
		exchangeCase("exchange/ring-large", ring, func(s int) int { return 100_003 + s }),
		exchangeCase("exchange/self", self, odd),
		exchangeCase("exchange/one-way", oneWay, odd),
		exchangeCase("exchange/zero-length", ring, func(int) int { return 0 }),
		exchangeCase("exchange/rank0-empty", swap, func(s int) int {
			if s == 0 {
				return 0
			}
			return s
		}),
		{Name: "fault/exchange-peer-aborts", MinRanks: 2, Run: exchangeAbort},
	}
}

// exchangeCase: rank r sends size(r) elements to its dest and receives
// size(source) elements from its source, in several dtypes; recv gets
// exactly what the source sent and send is left as it was.
func exchangeCase(name string, pair pairing, size sizing) Case {
	return Case{Name: name, Run: func(c comm.Communicator) error {
		r, n := c.Rank(), c.Size()
		dest, source := pair(r, n)
		var rep report
		for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64, tensor.Int64, tensor.BFloat16, tensor.Uint8, tensor.Bool} {
			out := 0
			if dest != comm.NoPeer {
				out = size(r)
			}
			send := ranked(dt, r, out)
			before := send.Clone()
			in, want := 0, tensor.New(dt, 0)
			if source != comm.NoPeer {
				in = size(source)
				want = ranked(dt, source, in)
			}
			recv := sentinels(dt, in)
			if source == comm.NoPeer {
				want = recv.Clone()
			}
			what := fmt.Sprintf("exchange of %v: %d elements to rank %d, %d from rank %d", dt, out, dest, in, source)
			rep.ok(what, comm.Exchange(c, send, dest, recv, source))
			rep.check(same(what, recv, want))
			rep.check(same(what+" (send buffer)", send, before))
		}
		return rep.err()
	}}
}

// exchangeErrorCases: arguments that one rank gets wrong, or that disagree
// across ranks.
func exchangeErrorCases() []errorCase {
	ring := func(c comm.Communicator) (int, int) {
		r, n := c.Rank(), c.Size()
		return (r + 1) % n, (r + n - 1) % n
	}
	return []errorCase{
		{"exchange/sizes-differ", 2, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			dest, source := ring(c)
			in := 3
			if last(c) {
				in = 4 // its source sends 3
			}
			send, recv := ranked(tensor.Float32, c.Rank(), 3), sentinels(tensor.Float32, in)
			keep(send, recv)
			return comm.Exchange(c, send, dest, recv, source)
		}, nil, nil},
		{"exchange/unmatched-peer", 2, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			dest, source := ring(c)
			if c.Rank() == 0 {
				source = comm.NoPeer // but the last rank sends to it
			}
			send, recv := ranked(tensor.Int32, c.Rank(), 2), sentinels(tensor.Int32, 2)
			keep(send, recv)
			return comm.Exchange(c, send, dest, recv, source)
		}, nil, nil},
		{"exchange/dest-out-of-range", 1, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			dest, source := ring(c)
			if last(c) {
				dest = c.Size()
			}
			send, recv := ranked(tensor.Int64, c.Rank(), 2), sentinels(tensor.Int64, 2)
			keep(send, recv)
			return comm.Exchange(c, send, dest, recv, source)
		}, nil, nil},
		{"exchange/dtypes-differ", 1, func(c comm.Communicator, keep func(...*tensor.Tensor)) error {
			dest, source := ring(c)
			dt := tensor.Float32
			if last(c) {
				dt = tensor.Float64
			}
			send, recv := ranked(tensor.Float32, c.Rank(), 2), sentinels(dt, 2)
			keep(send, recv)
			return comm.Exchange(c, send, dest, recv, source)
		}, nil, nil},
	}
}

// exchangeAbort: the last rank aborts instead of exchanging; its peers,
// waiting in the exchange, get a *comm.PeerError naming it, and their
// buffers are left alone.
func exchangeAbort(c comm.Communicator) error {
	const what = "exchange abort"
	return abortCase(c, what, "after a split group was aborted", func(rep *report, sub comm.Communicator, ab comm.Aborter) {
		r, n := sub.Rank(), sub.Size()
		last := n - 1
		cause := fmt.Errorf("commtest: rank %d fails before its exchange", last)
		if r == last {
			rep.ok(what, ab.Abort(cause))
		} else {
			send, recv := ranked(tensor.Float32, r, 5), sentinels(tensor.Float32, 5)
			err := comm.Exchange(sub, send, (r+1)%n, recv, (r+n-1)%n)
			peerError(rep, "exchange while a peer aborts", err, last, cause)
			if r == 0 { // its source is the aborting rank, which sent nothing
				rep.check(same("receive buffer after the abort", recv, sentinels(tensor.Float32, 5)))
			}
		}
	})
}
