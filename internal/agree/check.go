package agree

import (
	"fmt"

	"github.com/gohorovod/gohorovod/tensor"
)

// Args is one rank's arguments to a collective, buffers included: what
// the per-rank checks (Check) read, and, through Call, what the ranks must
// agree on.
type Args struct {
	Kind       Kind
	Rank, Size int             // this rank and the group's size
	Send       *tensor.Tensor  // the send buffer; the buffer of Allreduce and Bcast
	Recv       *tensor.Tensor  // the receive buffer (read by Gatherv on the root only)
	Counts     []int           // Allgatherv, Gatherv, ReduceScatter; what this rank sends each rank: Alltoallv
	RecvCounts []int           // Alltoallv: what this rank receives from each rank
	Root       int             // Gatherv, Bcast
	Op         tensor.ReduceOp // Allreduce, ReduceScatter
}

// Call returns what the ranks must agree on in a: its Kind, the dtype of
// its send buffer, and the fields of its kind.
func (a *Args) Call() Call {
	c := Call{Kind: a.Kind, Op: a.Op, Counts: a.Counts, RecvCounts: a.RecvCounts, Root: a.Root}
	if a.Send != nil {
		c.DType, c.N = a.Send.DType(), a.Send.Len()
	}
	return c
}

// Check returns what is wrong with a that this rank can tell alone (a
// buffer missing, on a device or too small for the counts, a counts vector
// of the wrong length, a root out of range, a reduction the dtype does not
// have), or nil. Every transport runs it before any data moves, so that a
// rank's own mistake reads the same on all of them; the text names neither
// the transport nor the collective (the caller adds them).
func (a *Args) Check() error {
	buf := "send"
	if a.Kind == Allreduce || a.Kind == Bcast {
		buf = "buffer"
	}
	if err := HostTensor(buf, a.Send); err != nil {
		return err
	}
	if a.Kind == Gatherv || a.Kind == Bcast {
		if err := CheckRoot(a.Root, a.Size); err != nil {
			return err
		}
	}
	if a.Kind == Allreduce || a.Kind == Bcast {
		return checkOp(a.Kind, a.Op, a.Send.DType())
	}
	recv := a.Recv
	if a.Kind == Gatherv && a.Rank != a.Root {
		recv = nil // ignored away from the root
	} else if err := HostTensor("receive", recv); err != nil {
		return err
	}
	own := -1
	if len(a.Counts) == a.Size {
		own = a.Counts[a.Rank]
	}
	switch a.Kind {
	case Allgatherv, Gatherv:
		return CheckVector(a.Size, a.Counts, a.Send, own, recv, Sum(a.Counts))
	case Alltoallv:
		if err := CheckVector(a.Size, a.Counts, a.Send, Sum(a.Counts), nil, -1); err != nil {
			return err
		}
		return CheckVector(a.Size, a.RecvCounts, a.Send, -1, recv, Sum(a.RecvCounts))
	case ReduceScatter:
		if err := CheckVector(a.Size, a.Counts, a.Send, Sum(a.Counts), recv, own); err != nil {
			return err
		}
		return checkOp(a.Kind, a.Op, a.Send.DType())
	}
	return nil
}

// checkOp reports a reduction that a collective of kind k (one that
// reduces) cannot make on dt.
func checkOp(k Kind, op tensor.ReduceOp, dt tensor.DType) error {
	if (k == Allreduce || k == ReduceScatter) && !op.Supports(dt) {
		return fmt.Errorf("reduction %v is not defined on %v", op, dt)
	}
	return nil
}

// HostTensor reports a buffer that no transport can move: nil, on a
// device, or of an invalid dtype. what names it ("send").
func HostTensor(what string, t *tensor.Tensor) error {
	switch {
	case t == nil:
		return fmt.Errorf("nil %s tensor", what)
	case t.Device().Kind != tensor.CPU:
		return fmt.Errorf("%s tensor on %v; the transports move host tensors only", what, t.Device())
	case !t.DType().Valid():
		return fmt.Errorf("%s tensor has invalid dtype %v", what, t.DType())
	}
	return nil
}

// CheckRoot reports a root outside a group of size ranks.
func CheckRoot(root, size int) error {
	if root < 0 || root >= size {
		return fmt.Errorf("root %d out of range for %d ranks", root, size)
	}
	return nil
}

// CheckVector validates the arguments of a v-collective that one rank can
// check alone: counts has one non-negative entry per rank, the send buffer
// holds sendWant elements (when send is not nil and sendWant not
// negative), recv holds at least recvWant (likewise), and the two have one
// dtype.
func CheckVector(size int, counts []int, send *tensor.Tensor, sendWant int, recv *tensor.Tensor, recvWant int) error {
	if len(counts) != size {
		return fmt.Errorf("%d counts for %d ranks", len(counts), size)
	}
	for r, c := range counts {
		if c < 0 {
			return fmt.Errorf("negative count %d for rank %d", c, r)
		}
	}
	if send != nil && sendWant >= 0 && send.Len() != sendWant {
		return fmt.Errorf("send buffer holds %d elements, want %d", send.Len(), sendWant)
	}
	if recv != nil && recvWant >= 0 && recv.Len() < recvWant {
		return fmt.Errorf("receive buffer holds %d elements, want at least %d", recv.Len(), recvWant)
	}
	if send != nil && recv != nil && send.DType() != recv.DType() {
		return fmt.Errorf("send dtype %v differs from receive dtype %v", send.DType(), recv.DType())
	}
	return nil
}

// Sum returns the sum of counts.
func Sum(counts []int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}
