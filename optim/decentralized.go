package optim

import (
	"context"
	"errors"
	"fmt"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// ErrDecentralized is returned (wrapped) by the constructors of the
// decentralized algorithms given invalid settings. The checks need no
// communication, so that every rank, given the same settings, fails alike
// before any collective.
var ErrDecentralized = errors.New("optim: invalid decentralized settings")

// PeerSelection chooses with whom a rank averages its weights in
// decentralized SGD.
type PeerSelection int

const (
	// PeerAll averages the weights of every rank (Bagua's "all").
	PeerAll PeerSelection = iota
	// PeerShiftOne averages with one peer per communication, the peers
	// changing at each one (Bagua's "shift_one", see ShiftOnePeer); it
	// needs an even number of ranks.
	PeerShiftOne
)

// String returns Bagua's name of the mode ("all", "shift_one").
func (p PeerSelection) String() string {
	switch p {
	case PeerAll:
		return "all"
	case PeerShiftOne:
		return "shift_one"
	}
	return fmt.Sprintf("PeerSelection(%d)", int(p))
}

// ShiftOnePeer returns rank's peer at the s-th communication (from 0) of
// PeerShiftOne among size ranks (size even), Bagua's formula: a rank of
// the lower half pairs with ((s+rank) mod ((size+1)/2)) + size/2, a rank of
// the upper half with (rank − size/2 − s) mod (size/2). Every rank of the
// lower half meets every rank of the upper half, one pair per rank at each
// communication.
func ShiftOnePeer(rank, size, s int) int {
	h := size / 2
	if rank < h {
		return (s+rank)%((size+1)/2) + h
	}
	m := (rank - h - s) % h
	if m < 0 {
		m += h
	}
	return m
}

// DecentralizedConfig configures decentralized SGD.
type DecentralizedConfig struct {
	// PeerSelection is with whom each rank averages (default PeerAll).
	PeerSelection PeerSelection
	// CommunicationInterval is the number of steps from one averaging to
	// the next (Bagua's communication_interval): the ranks average before
	// steps 0, k, 2k, ... and step on their own in between. It must be at
	// least 1.
	CommunicationInterval int
	// Hierarchy, if not nil, makes the averaging hierarchical: the ranks
	// of each node average first, the node leaders then average among
	// themselves with PeerSelection, and each leader broadcasts the result
	// to its node.
	Hierarchy *Hierarchy
}

// Hierarchy is the two levels of hierarchical decentralized SGD.
type Hierarchy struct {
	// Node holds the ranks of this rank's node; its rank 0 is the node's
	// leader.
	Node Collectives
	// Leaders holds the node leaders, one per node, on the leaders; nil on
	// the other ranks.
	Leaders ExchangeCollectives
	// Nodes is the number of nodes (the size of Leaders), known to every
	// rank so that every rank checks the settings alike.
	Nodes int

	r     *hvd.Runtime    // NewHierarchy's runtime
	added *hvd.ProcessSet // the leaders' set NewHierarchy registered, or nil
}

// checkDecentralized validates cfg for a group of size ranks.
func checkDecentralized(cfg DecentralizedConfig, size int) error {
	if cfg.CommunicationInterval < 1 {
		return fmt.Errorf("%w: communication interval %d must be >= 1", ErrDecentralized, cfg.CommunicationInterval)
	}
	if cfg.PeerSelection != PeerAll && cfg.PeerSelection != PeerShiftOne {
		return fmt.Errorf("%w: unknown peer selection %v", ErrDecentralized, cfg.PeerSelection)
	}
	peers, what := size, "ranks"
	if h := cfg.Hierarchy; h != nil {
		if h.Node == nil || h.Nodes < 1 {
			return fmt.Errorf("%w: a hierarchy needs the node's Collectives and the number of nodes", ErrDecentralized)
		}
		peers, what = h.Nodes, "nodes"
	}
	if cfg.PeerSelection == PeerShiftOne && peers%2 != 0 {
		return fmt.Errorf("%w: peer selection shift_one needs an even number of %s, not %d", ErrDecentralized, what, peers)
	}
	return nil
}

// Decentralized is Bagua's decentralized SGD: the ranks exchange weights,
// not gradients. Before a communicating step's forward pass (Start), each
// rank sends its weights x_t; after backward (Step), it waits, sets its
// parameters to the average with its peers (every rank with PeerAll, one
// peer with PeerShiftOne), and the wrapped optimizer applies the gradient
// computed at x_t: x_{t+1} = avg(x_t) − lr·g(x_t). Steps between two
// communications are purely local.
//
// Every parameter must have the same dtype (float32 or float64), and the
// same shapes on every rank. The ranks must take the same number of steps.
// A Decentralized is used by one goroutine at a time; it is an Optimizer
// whose Step communicates (with context.Background: use StepContext to
// bound the wait).
type Decentralized struct {
	passThrough
	coll   ExchangeCollectives
	cfg    DecentralizedConfig
	params []Param
	dtype  tensor.DType

	send, recv *tensor.Tensor // the flat weights sent, and received
	steps      int            // steps taken
	comms      int            // communications so far
	started    bool           // this step's exchange has started
	pending    Waiter         // the exchange in flight, or nil
	sent       int            // bytes this rank sent at its last communication
}

// NewDecentralized wraps inner (a plain, not distributed, optimizer over
// the model's parameters) in decentralized SGD over coll's ranks. coll is
// used for PeerAll and PeerShiftOne without a hierarchy; with one, the
// hierarchy's collectives are.
func NewDecentralized(inner Optimizer, coll ExchangeCollectives, cfg DecentralizedConfig) (*Decentralized, error) {
	if inner == nil || coll == nil {
		return nil, fmt.Errorf("%w: nil optimizer or collectives", ErrDecentralized)
	}
	if err := checkDecentralized(cfg, coll.Size()); err != nil {
		return nil, err
	}
	params := inner.Params()
	dt, n, err := flatParams(params)
	if err != nil {
		return nil, err
	}
	return &Decentralized{passThrough: passThrough{inner}, coll: coll, cfg: cfg, params: params, dtype: dt,
		send: tensor.New(dt, n), recv: tensor.New(dt, n)}, nil
}

// flatParams checks that params share one floating dtype and returns it
// with their total element count.
func flatParams(params []Param) (tensor.DType, int, error) {
	if err := CheckParams(params); err != nil {
		return 0, 0, err
	}
	if len(params) == 0 {
		return 0, 0, fmt.Errorf("%w: no parameters", ErrDecentralized)
	}
	dt, n := params[0].Value.DType(), 0
	for _, p := range params {
		if p.Value.DType() != dt || (dt != tensor.Float32 && dt != tensor.Float64) {
			return 0, 0, fmt.Errorf("%w: parameter %q is %v; every parameter must be float32, or every one float64", ErrDecentralized, p.Name, p.Value.DType())
		}
		n += p.Value.Len()
	}
	return dt, n, nil
}

// pack copies the parameters into t, back to back.
func pack(params []Param, t *tensor.Tensor) {
	b, off := t.Bytes(), 0
	for _, p := range params {
		off += copy(b[off:], p.Value.Bytes())
	}
}

// unpack copies t back into the parameters.
func unpack(t *tensor.Tensor, params []Param) {
	b, off := t.Bytes(), 0
	for _, p := range params {
		off += copy(p.Value.Bytes(), b[off:])
	}
}

// Communicates reports whether the next step averages (steps 0, k, 2k, ...
// for the communication interval k).
func (d *Decentralized) Communicates() bool { return d.steps%d.cfg.CommunicationInterval == 0 }

// Peer returns this rank's peer at the next communication with
// PeerShiftOne (a rank of the leaders' group with a hierarchy), or NoPeer.
func (d *Decentralized) Peer() int {
	if d.cfg.PeerSelection != PeerShiftOne {
		return NoPeer
	}
	if h := d.cfg.Hierarchy; h != nil {
		if h.Leaders == nil {
			return NoPeer
		}
		return ShiftOnePeer(h.Leaders.Rank(), h.Nodes, d.comms)
	}
	return ShiftOnePeer(d.coll.Rank(), d.coll.Size(), d.comms)
}

// BytesSent returns the bytes of weights this rank contributed to its last
// communication (0 if it has not communicated): its weights once per
// collective (the allreduce or exchange; with a hierarchy, the node's
// average and, on a leader, the leaders' exchange), without the
// negotiation and without what an allreduce's algorithm relays.
func (d *Decentralized) BytesSent() int { return d.sent }

// payload is the bytes of this rank's flat weights.
func (d *Decentralized) payload() int { return d.send.Len() * d.dtype.Size() }

// Start starts sending this rank's current weights if the next step
// communicates; call it before the forward pass, so that the exchange
// overlaps forward and backward. Calling it again in the same step, or in
// a step that does not communicate, does nothing. Step calls it if the
// caller has not.
func (d *Decentralized) Start() error {
	if d.started || !d.Communicates() {
		return nil
	}
	d.started = true
	pack(d.params, d.send)
	d.sent = d.payload()
	var err error
	if d.cfg.Hierarchy != nil {
		// The node's average comes first; the leaders' exchange waits for it.
		d.pending, err = d.cfg.Hierarchy.Node.AllreduceAsync(d.send, "decentralized.node", Average, 1, 1)
		return err
	}
	d.pending, err = d.exchange(d.coll)
	return err
}

// exchange starts this rank's averaging with its peers in c.
func (d *Decentralized) exchange(c ExchangeCollectives) (Waiter, error) {
	if d.cfg.PeerSelection == PeerAll {
		return c.AllreduceAsync(d.send, "decentralized.all", Average, 1, 1)
	}
	p := d.Peer()
	return c.ExchangeAsync(d.send, d.recv, p, p, "decentralized.shift_one")
}

// Step is StepContext with context.Background.
func (d *Decentralized) Step() error { return d.StepContext(context.Background()) }

// StepContext finishes the step: it starts the exchange if Start was not
// called, waits for it, sets the parameters to the average, and has the
// wrapped optimizer apply the gradients. If ctx ends during the wait, it
// returns ctx's error with the exchange still in flight and the step not
// taken; the next StepContext waits for the same exchange.
func (d *Decentralized) StepContext(ctx context.Context) error {
	if err := d.Start(); err != nil {
		return err
	}
	if err := d.finish(ctx); err != nil {
		return err
	}
	if err := d.inner.Step(); err != nil {
		return err
	}
	if d.started {
		d.comms++
	}
	d.started = false
	d.steps++
	return nil
}

// finish waits for the exchange in flight, if any, and sets the
// parameters to the average.
func (d *Decentralized) finish(ctx context.Context) error {
	if d.pending == nil {
		return nil
	}
	if err := d.pending.Wait(ctx); err != nil {
		return err
	}
	d.pending = nil
	if d.cfg.Hierarchy != nil {
		if err := d.finishHierarchy(ctx); err != nil {
			return err
		}
	} else if d.cfg.PeerSelection == PeerShiftOne {
		midpoint(d.send, d.recv)
	}
	unpack(d.send, d.params)
	return nil
}

// finishHierarchy takes the node's average (in d.send) through the
// leaders' averaging and back to every rank of the node.
func (d *Decentralized) finishHierarchy(ctx context.Context) error {
	h := d.cfg.Hierarchy
	if h.Leaders != nil {
		d.sent += d.payload() // the leaders' exchange, after the node's average
		w, err := d.exchange(h.Leaders)
		if err == nil {
			err = w.Wait(ctx)
		}
		if err != nil {
			return err
		}
		if d.cfg.PeerSelection == PeerShiftOne {
			midpoint(d.send, d.recv)
		}
	}
	w, err := h.Node.BroadcastAsync(d.send, 0, "decentralized.node_broadcast")
	if err == nil {
		err = w.Wait(ctx)
	}
	return err
}

// midpoint sets x to (x+y)/2, element by element; both ranks of a pair
// compute the same values, bit for bit.
func midpoint(x, y *tensor.Tensor) {
	switch x.DType() {
	case tensor.Float32:
		midpointOf(x.Float32s(), y.Float32s())
	case tensor.Float64:
		midpointOf(x.Float64s(), y.Float64s())
	default:
		panic(fmt.Sprintf("optim: midpoint of %v", x.DType()))
	}
}

func midpointOf[T float32 | float64](x, y []T) {
	for i := range x {
		x[i] = (x[i] + y[i]) * 0.5
	}
}

// passThrough gives an algorithm that wraps an optimizer the Optimizer
// methods it passes through: Params, ZeroGrad, LR, SetLR, State and
// SetState are the wrapped optimizer's.
type passThrough struct{ inner Optimizer }

// Params returns the wrapped optimizer's parameters.
func (w passThrough) Params() []Param { return w.inner.Params() }

// ZeroGrad zeroes the gradients.
func (w passThrough) ZeroGrad() error { return w.inner.ZeroGrad() }

// LR returns the wrapped optimizer's learning rate.
func (w passThrough) LR() float64 { return w.inner.LR() }

// SetLR sets the wrapped optimizer's learning rate.
func (w passThrough) SetLR(lr float64) { w.inner.SetLR(lr) }

// State returns the wrapped optimizer's state.
func (w passThrough) State() *State { return w.inner.State() }

// SetState sets the wrapped optimizer's state.
func (w passThrough) SetState(s *State) error { return w.inner.SetState(s) }

var _ Optimizer = (*Decentralized)(nil)
