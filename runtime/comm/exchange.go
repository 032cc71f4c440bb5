package comm

import (
	"fmt"

	"github.com/gohorovod/gohorovod/internal/agree"

	"github.com/gohorovod/gohorovod/tensor"
)

// NoPeer, as the destination or the source of Exchange, means that this
// rank sends, or receives, nothing in that exchange.
const NoPeer = -1

// Exchanger is implemented by communicators that carry Exchange with a
// point-to-point primitive of their own: the MPI and embedded transports
// (MPI_Sendrecv, or the two messages alone, with the agreement check off;
// ExchangeAlltoallv with it on) and the fault wrapper. Exchange uses it
// when the communicator offers it, and Alltoallv otherwise; either way the
// semantics are Exchange's.
type Exchanger interface {
	Exchange(send *tensor.Tensor, dest int, recv *tensor.Tensor, source int) error
}

// Exchange is the communicators' point-to-point exchange: every rank of
// c's group calls it, in the same order as its other collectives; this rank
// sends all of send to rank dest and fills all of recv with what rank
// source sends it. dest and source may be this rank (a copy), or NoPeer
// (nothing sent, or nothing received: recv is left as it was). The pairs
// must match across the group: when rank r names dest d, rank d names
// source r and its recv holds exactly send.Len() elements of r's dtype.
//
// Arguments that are wrong on one rank (a peer out of range, a dtype that
// differs between send and recv) or that disagree across ranks (a rank that
// receives from r while r sends elsewhere, sizes that differ) are reported
// as an error on every rank of the group where the transport checks
// agreement (the in-memory and embedded transports always; MPI with its
// agreement check, on by default), and move no data. send and recv must not
// be nil; with NoPeer they may hold zero elements.
//
// A pairwise swap is Exchange(send, p, recv, p) on both ranks; a shift
// along a ring is Exchange(send, (r+1)%n, recv, (r+n-1)%n) on every rank r.
// On a communicator without Exchanger, the exchange is one Alltoallv whose
// blocks are empty except the one for dest and the one from source.
func Exchange(c Communicator, send *tensor.Tensor, dest int, recv *tensor.Tensor, source int) error {
	if x, ok := c.(Exchanger); ok {
		return x.Exchange(send, dest, recv, source)
	}
	return ExchangeAlltoallv(c, send, dest, recv, source)
}

// ExchangeAlltoallv is Exchange carried by one Alltoallv on c, whether or
// not c is an Exchanger: for an Exchanger that falls back to it (the
// embedded transport with its agreement check on).
func ExchangeAlltoallv(c Communicator, send *tensor.Tensor, dest int, recv *tensor.Tensor, source int) error {
	n := c.Size()
	local := CheckExchange(n, send, dest, recv, source)
	if local != nil {
		// Join the collective with counts that every transport refuses,
		// so that the other ranks get an error too instead of waiting.
		empty := tensor.New(tensor.Uint8, 0)
		_ = c.Alltoallv(empty, nil, empty, nil)
		return local
	}
	sendCounts, recvCounts := make([]int, n), make([]int, n)
	out := tensor.New(send.DType(), 0)
	if dest != NoPeer {
		sendCounts[dest] = send.Len()
		out = send
	}
	if source != NoPeer {
		recvCounts[source] = recv.Len()
	}
	return c.Alltoallv(out, sendCounts, recv, recvCounts)
}

// CheckExchange validates the arguments of an Exchange that one rank can
// check alone, in a group of size ranks; transports that implement
// Exchanger call it before any data moves.
func CheckExchange(size int, send *tensor.Tensor, dest int, recv *tensor.Tensor, source int) error {
	switch {
	case send == nil || recv == nil:
		return fmt.Errorf("comm: exchange: nil send or receive buffer (use a zero-length tensor with NoPeer)")
	case agree.HostTensor("send", send) != nil:
		return fmt.Errorf("comm: exchange: %w", agree.HostTensor("send", send))
	case agree.HostTensor("receive", recv) != nil:
		return fmt.Errorf("comm: exchange: %w", agree.HostTensor("receive", recv))
	case dest < NoPeer || dest >= size:
		return fmt.Errorf("comm: exchange: destination rank %d out of range [0, %d) (or NoPeer)", dest, size)
	case source < NoPeer || source >= size:
		return fmt.Errorf("comm: exchange: source rank %d out of range [0, %d) (or NoPeer)", source, size)
	case send.DType() != recv.DType():
		return fmt.Errorf("comm: exchange: send dtype %v differs from receive dtype %v", send.DType(), recv.DType())
	}
	return nil
}
