package hier

import (
	"errors"
	"fmt"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// Comms holds the two communicators a rank needs for the hierarchical
// collectives of one group, and the group's layout. Open makes it. Like a
// comm.Communicator it is used by one goroutine at a time, and its
// collectives are called by every rank of the group, in the same order, with
// arguments that agree.
//
// The fields are exported so that the runtime (and tests) can see and wrap
// the communicators; replacing one with a communicator over a different
// group breaks the collectives.
type Comms struct {
	// Local holds the ranks of this rank's node, ordered by rank in the
	// group (c.SplitLocal()).
	Local comm.Communicator
	// Cross holds the ranks that have this rank's local rank, one per node
	// that has more ranks than that, ordered by rank in the group
	// (c.Split(Local.Rank(), c.Rank())). The Cross of local rank 0 holds
	// one rank of every node, in node order, since a node's local rank 0
	// is its lowest rank; the others are in node order only when the
	// nodes are contiguous.
	Cross comm.Communicator
	// Layout is the group's placement on nodes.
	Layout Layout

	rank    int               // this rank in the group
	scratch []byte            // reused by every call; see grow
	views   [3]*tensor.Tensor // over scratch, reused; see scratchView
	counts  []int             // reused counts, one per local rank or per rank
	totals  []int             // reused element counts per node
	offs    []int             // reused offsets per rank
	failed  error             // why the communicators were torn down, once they were
	closed  bool
}

// Open makes the hierarchical communicators of group c: Local from
// c.SplitLocal(), Cross from c.Split(Local.Rank(), c.Rank()), and the Layout
// from Discover. It is collective over c. On an error it closes what it
// made and returns the error; c itself is left alone.
func Open(c comm.Communicator) (*Comms, error) {
	local, err := c.SplitLocal()
	if err != nil {
		return nil, fmt.Errorf("hier: open: splitting the node groups: %w", err)
	}
	return OpenLocal(c, local)
}

// OpenLocal is Open with the node groups given: local must hold the ranks
// of c that share this rank's node, ordered by rank in c (for example
// c.Split(node, c.Rank()) where the caller names the nodes itself). Open
// takes ownership of local: it is closed with the Comms, or on an error.
func OpenLocal(c, local comm.Communicator) (*Comms, error) {
	cross, err := c.Split(local.Rank(), c.Rank())
	if err != nil {
		local.Close()
		return nil, fmt.Errorf("hier: open: splitting the cross-node groups: %w", err)
	}
	l, err := Discover(c, local)
	if err != nil {
		local.Close()
		cross.Close()
		return nil, err
	}
	return &Comms{Local: local, Cross: cross, Layout: l, rank: c.Rank()}, nil
}

// Close closes Local and Cross (collective, as their Close is). It is
// idempotent; later collectives return an error matching comm.ErrClosed.
func (h *Comms) Close() error {
	if h.closed {
		return nil
	}
	h.closed = true
	return errors.Join(h.Local.Close(), h.Cross.Close())
}

// usable returns the error for a call on closed or torn-down communicators.
func (h *Comms) usable() error {
	if h.closed {
		return comm.ErrClosed
	}
	if h.failed != nil {
		return fmt.Errorf("hier: %w after an earlier failure (%w)", comm.ErrClosed, h.failed)
	}
	return nil
}

// fail records that step of a collective failed with err, tears down Local
// and Cross where they can be aborted (comm.Aborter) and returns the wrapped
// error. Once one step of a hierarchical collective has failed on one rank,
// the ranks are out of step, and ranks in other node or cross groups may be
// waiting for it in a collective it will never call; the abort releases
// them with a *comm.PeerError, and they in turn abort their own groups,
// which reach every rank (the node groups and the cross group of local rank
// 0 connect them all). A communicator that cannot abort is left as it is:
// on MPI a failed collective ends the job anyway.
func (h *Comms) fail(op, step string, err error) error {
	err = fmt.Errorf("hier: %s: %s: %w", op, step, err)
	h.failed = err
	for _, c := range []comm.Communicator{h.Local, h.Cross} {
		if a, ok := c.(comm.Aborter); ok {
			a.Abort(err)
		}
	}
	return err
}

// grow returns the scratch buffer resized to n bytes, reallocating only
// when it must grow.
func (h *Comms) grow(n int) []byte {
	if cap(h.scratch) < n {
		h.scratch = make([]byte, n)
	}
	h.scratch = h.scratch[:n]
	return h.scratch
}

// scratchView returns a tensor over elems elements of dtype dt in the
// scratch buffer from byte off, which the caller has grown to hold them.
// Each slot keeps the tensor it returned last, and returns it again when it
// is the same view, so that calls of the same size (the steady state of a
// training loop) allocate nothing.
func (h *Comms) scratchView(slot int, dt tensor.DType, off, elems int) *tensor.Tensor {
	nb := elems * dt.Size()
	if t := h.views[slot]; t != nil && t.DType() == dt && t.Len() == elems &&
		(nb == 0 || &t.Bytes()[0] == &h.scratch[off]) {
		return t
	}
	h.views[slot] = view(dt, h.scratch[off:off+nb], elems)
	return h.views[slot]
}

// ints returns *s resized to n elements and zeroed, reallocating only when
// it must grow.
func ints(s *[]int, n int) []int {
	if cap(*s) < n {
		*s = make([]int, n)
	}
	*s = (*s)[:n]
	clear(*s)
	return *s
}

// view returns a tensor over the first elems elements of b.
func view(dt tensor.DType, b []byte, elems int) *tensor.Tensor {
	t, err := tensor.FromBytes(dt, b[:elems*dt.Size()])
	if err != nil {
		panic(err) // a whole number of elements by construction
	}
	return t
}

// pieces splits n elements into len(counts) blocks whose sizes differ by at
// most one, the remainder going to the first blocks, and writes their sizes
// into counts.
func pieces(counts []int, n int) {
	q, rem := n/len(counts), n%len(counts)
	for i := range counts {
		counts[i] = q
		if i < rem {
			counts[i]++
		}
	}
}

// checkHost returns an error unless t is a host tensor of a valid dtype.
func checkHost(op, name string, t *tensor.Tensor) error {
	switch {
	case t == nil:
		return fmt.Errorf("hier: %s: nil %s tensor", op, name)
	case t.Device().Kind != tensor.CPU:
		return fmt.Errorf("hier: %s: %s tensor on %v; the hierarchical collectives move host tensors only", op, name, t.Device())
	case !t.DType().Valid():
		return fmt.Errorf("hier: %s: %s tensor has invalid dtype", op, name)
	}
	return nil
}

// Allreduce combines buf elementwise across the ranks of the group with op,
// in place, as the group's Allreduce does, by Horovod's hierarchical
// algorithm (see the package documentation): within each node, then across
// nodes, then within each node again. Every rank ends with the same values.
// Integer and bool results equal the flat allreduce's bit for bit;
// floating-point sums and products may round differently, since the order
// of the combination differs.
//
// Arguments this rank can check alone (a host tensor, an op defined on its
// dtype) are checked before anything moves, and an error leaves the Comms
// usable. An error from a step of the algorithm tears Local and Cross down,
// so that no rank is left waiting (see Failures in the package
// documentation), and every later call returns an error matching
// comm.ErrClosed.
func (h *Comms) Allreduce(buf *tensor.Tensor, op tensor.ReduceOp) error {
	const name = "allreduce"
	if err := h.usable(); err != nil {
		return err
	}
	if err := checkHost(name, "buffer", buf); err != nil {
		return err
	}
	dt := buf.DType()
	if !op.Supports(dt) {
		return fmt.Errorf("hier: %s: reduction %v is not defined on %v", name, op, dt)
	}
	n, l := buf.Len(), h.Layout
	switch {
	case n == 0:
		return nil
	case l.Nodes() == 1:
		if err := h.Local.Allreduce(buf, op); err != nil {
			return h.fail(name, "allreduce within the node", err)
		}
		return nil
	case h.Local.Size() == 1:
		// Alone on the node: this rank is its node's piece holder (or its
		// local rank 0) and takes part in the cross step with the whole
		// buffer, which is its own reduction within the node.
		if err := h.Cross.Allreduce(buf, op); err != nil {
			return h.fail(name, "allreduce across nodes", err)
		}
		return nil
	case l.Homogeneous():
		return h.allreducePieces(buf, op)
	}
	return h.allreduceRoot(buf, op)
}

// allreducePieces is the allreduce on homogeneous nodes: reduce-scatter
// within the node, one piece per local rank; allreduce piece k across nodes
// among the local ranks k; allgather within the node.
func (h *Comms) allreducePieces(buf *tensor.Tensor, op tensor.ReduceOp) error {
	const name = "allreduce"
	dt, n := buf.DType(), buf.Len()
	counts := ints(&h.counts, h.Local.Size())
	pieces(counts, n)
	k := h.Local.Rank()
	h.grow(counts[0] * dt.Size())
	piece := h.scratchView(0, dt, 0, counts[k])
	if err := h.Local.ReduceScatter(buf, piece, counts, op); err != nil {
		return h.fail(name, "reduce-scatter within the node", err)
	}
	// Every member of this cross group has piece k of the same size, so
	// they skip an empty piece together.
	if counts[k] > 0 {
		if err := h.Cross.Allreduce(piece, op); err != nil {
			return h.fail(name, "allreduce across nodes", err)
		}
	}
	if err := h.Local.Allgatherv(piece, buf, counts); err != nil {
		return h.fail(name, "allgather within the node", err)
	}
	return nil
}

// allreduceRoot is the allreduce on nodes of different sizes: reduce within
// the node onto local rank 0 (a reduce-scatter that leaves it everything);
// allreduce across nodes among the local ranks 0; broadcast within the node
// from local rank 0.
func (h *Comms) allreduceRoot(buf *tensor.Tensor, op tensor.ReduceOp) error {
	const name = "allreduce"
	dt, n := buf.DType(), buf.Len()
	counts := ints(&h.counts, h.Local.Size())
	counts[0] = n
	k := h.Local.Rank()
	root := k == 0
	h.grow(counts[k] * dt.Size())
	acc := h.scratchView(0, dt, 0, counts[k])
	if err := h.Local.ReduceScatter(buf, acc, counts, op); err != nil {
		return h.fail(name, "reduce within the node", err)
	}
	if root {
		if err := h.Cross.Allreduce(acc, op); err != nil {
			return h.fail(name, "allreduce across nodes", err)
		}
		copy(buf.Bytes(), acc.Bytes())
	}
	if err := h.Local.Bcast(buf, 0); err != nil {
		return h.fail(name, "broadcast within the node", err)
	}
	return nil
}

// Allgatherv concatenates, in rank order of the group, counts[r] elements
// from each rank r into recv on every rank, as the group's Allgatherv does
// (send holds counts[rank] elements, recv at least the sum of counts;
// elements of recv past the sum are left alone; send and recv must not
// overlap), by the hierarchical
// algorithm: gather within the node onto local rank 0, allgather the nodes'
// blocks across nodes among the local ranks 0, reorder from node order into
// rank order where the nodes' ranks are not consecutive, and broadcast
// within the node. Errors are handled as by Allreduce.
func (h *Comms) Allgatherv(send, recv *tensor.Tensor, counts []int) error {
	const name = "allgatherv"
	if err := h.usable(); err != nil {
		return err
	}
	if err := checkHost(name, "send", send); err != nil {
		return err
	}
	if err := checkHost(name, "receive", recv); err != nil {
		return err
	}
	l := h.Layout
	own := -1
	if len(counts) == l.Size() {
		own = counts[h.rank]
	}
	if err := comm.CheckLocal("hier: "+name, l.Size(), counts, send, own, recv, comm.Sum(counts)); err != nil {
		return err
	}
	total := comm.Sum(counts)
	switch {
	case total == 0:
		return nil
	case l.Nodes() == 1:
		// The node group is the group, in the same order.
		if err := h.Local.Allgatherv(send, recv, counts); err != nil {
			return h.fail(name, "allgather within the node", err)
		}
		return nil
	case l.Nodes() == l.Size():
		// One rank per node: the cross group is the group, in the same
		// order.
		if err := h.Cross.Allgatherv(send, recv, counts); err != nil {
			return h.fail(name, "allgather across nodes", err)
		}
		return nil
	}

	return h.allgatherNodes(send, recv, counts, total)
}

// allgatherNodes is Allgatherv over several nodes with several ranks on
// some: gather in the node to its local rank 0, allgather the nodes'
// blocks across, broadcast in the node.
func (h *Comms) allgatherNodes(send, recv *tensor.Tensor, counts []int, total int) error {
	const name = "allgatherv"
	l := h.Layout
	dt, esz := send.DType(), send.DType().Size()
	members := l.Ranks(l.Node(h.rank))
	local := ints(&h.counts, len(members))
	for i, r := range members {
		local[i] = counts[r]
	}
	mine := comm.Sum(local)
	all := recv
	if recv.Len() != total {
		all = view(dt, recv.Bytes(), total)
	}

	if h.Local.Rank() != 0 {
		if err := h.Local.Gatherv(send, nil, local, 0); err != nil {
			return h.fail(name, "gather within the node", err)
		}
		if err := h.Local.Bcast(all, 0); err != nil {
			return h.fail(name, "broadcast within the node", err)
		}
		return nil
	}

	// Local rank 0 gathers its node's block into scratch. When the nodes'
	// ranks are consecutive, node order is rank order and the cross step
	// fills recv; otherwise it fills more scratch, staged in node order,
	// and the reorder copies each rank's block to its place in recv.
	var block, nodeOrder *tensor.Tensor
	if l.Contiguous() {
		h.grow(mine * esz)
		block, nodeOrder = h.scratchView(1, dt, 0, mine), all
	} else {
		h.grow((mine + total) * esz)
		block, nodeOrder = h.scratchView(1, dt, 0, mine), h.scratchView(2, dt, mine*esz, total)
	}
	if len(members) == 1 {
		block = send
	} else if err := h.Local.Gatherv(send, block, local, 0); err != nil {
		return h.fail(name, "gather within the node", err)
	}
	totals := ints(&h.totals, l.Nodes())
	for r, c := range counts {
		totals[l.Node(r)] += c
	}
	if err := h.Cross.Allgatherv(block, nodeOrder, totals); err != nil {
		return h.fail(name, "allgather across nodes", err)
	}
	if !l.Contiguous() {
		h.reorder(all.Bytes(), nodeOrder.Bytes(), counts, esz)
	}
	if len(members) > 1 {
		if err := h.Local.Bcast(all, 0); err != nil {
			return h.fail(name, "broadcast within the node", err)
		}
	}
	return nil
}

// reorder copies the blocks of src, which lie in node order (node 0's
// ranks' blocks in rank order, then node 1's, ...), to their places in rank
// order in dst.
func (h *Comms) reorder(dst, src []byte, counts []int, esz int) {
	l := h.Layout
	offs := ints(&h.offs, l.Size())
	at := 0
	for r, c := range counts {
		offs[r] = at
		at += c * esz
	}
	at = 0
	for k := range l.Nodes() {
		for _, r := range l.Ranks(k) {
			c := counts[r] * esz
			copy(dst[offs[r]:offs[r]+c], src[at:at+c])
			at += c
		}
	}
}
