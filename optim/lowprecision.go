package optim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/gohorovod/gohorovod/tensor"
)

// LowPrecisionConfig configures LowPrecisionDecentralized.
type LowPrecisionConfig struct {
	// CommunicationInterval is the number of steps from one communication
	// to the next (at least 1): steps 0, k, 2k, ... mix and communicate,
	// the others are purely local.
	CommunicationInterval int
}

// LowPrecisionDecentralized is Bagua's low-precision decentralized SGD
// (Tang et al., "Communication Compression for Decentralized Training",
// arXiv 1803.06443, difference compression): the ranks form a fixed ring,
// and each keeps replicas of its own weights and of both neighbours'. At a
// communicating step the parameters become (x + left + right)/3, the
// wrapped optimizer applies the gradient, and the difference z between the
// result and the rank's own replica is quantized to 8 bits
// (QuantizeMinMaxUint8, one min and max per parameter tensor) and sent to
// both neighbours; every holder of a replica of this rank, itself
// included, adds the same dequantized z, so that a rank's weights stay
// equal, bit for bit, to its left neighbour's right replica and its right
// neighbour's left replica. Each communication sends a payload of one
// byte per element plus 8 bytes per parameter tensor, a quarter of the
// fp32 weights, to each neighbour (once on a ring of two ranks).
//
// The first Step exchanges the weights once in full precision, to set the
// replicas, so that the ranks need not start from the same weights. The
// exchange of a step's differences goes on while the next forward and
// backward passes run; the next Step (or Wait, after the last) completes
// it.
// Parameters must all be float32 or all float64. A rank whose difference
// is not finite (diverged training) sends a payload marked invalid: it
// returns the quantizer's error and its neighbours, at their next Step or
// Wait, an error naming it: the exchange still happens, so nobody waits. Used by one goroutine at a time.
type LowPrecisionDecentralized struct {
	passThrough
	coll     ExchangeCollectives
	params   []Param
	interval int
	rank     int
	size     int

	x, self, left, right  *tensor.Tensor // flat, in the parameters' dtype
	z                     []float32      // the difference, then its dequantized value
	payload, fromL, fromR *tensor.Tensor // uint8
	steps                 int
	ready                 bool
	sent                  int
	pending               *inFlight // the last communication's exchange, until Wait
}

// NewLowPrecisionDecentralized wraps inner (a plain optimizer over the
// model's parameters) in low-precision decentralized SGD over coll's
// ranks, in rank order around the ring.
func NewLowPrecisionDecentralized(inner Optimizer, coll ExchangeCollectives, cfg LowPrecisionConfig) (*LowPrecisionDecentralized, error) {
	if inner == nil || coll == nil {
		return nil, fmt.Errorf("%w: nil optimizer or collectives", ErrDecentralized)
	}
	if cfg.CommunicationInterval < 1 {
		return nil, fmt.Errorf("%w: communication interval %d must be >= 1", ErrDecentralized, cfg.CommunicationInterval)
	}
	params := inner.Params()
	dt, n, err := flatParams(params)
	if err != nil {
		return nil, err
	}
	bytes := n + 8*len(params)
	return &LowPrecisionDecentralized{passThrough: passThrough{inner}, coll: coll, params: params, interval: cfg.CommunicationInterval,
		rank: coll.Rank(), size: coll.Size(),
		x: tensor.New(dt, n), self: tensor.New(dt, n), left: tensor.New(dt, n), right: tensor.New(dt, n), z: make([]float32, n),
		payload: tensor.New(tensor.Uint8, bytes), fromL: tensor.New(tensor.Uint8, bytes), fromR: tensor.New(tensor.Uint8, bytes)}, nil
}

// Communicates reports whether the next step mixes and communicates.
func (d *LowPrecisionDecentralized) Communicates() bool { return d.steps%d.interval == 0 }

// BytesSent returns the bytes this rank sent at its last communication
// (every payload); 0 before the first.
func (d *LowPrecisionDecentralized) BytesSent() int { return d.sent }

// Replicas returns copies of this rank's replicas of its left and right
// neighbours' weights (flat, the parameters back to back), as of the last
// Wait; nil before the first Step.
func (d *LowPrecisionDecentralized) Replicas() (left, right *tensor.Tensor) {
	if !d.ready {
		return nil, nil
	}
	return d.left.Clone(), d.right.Clone()
}

// neighbours returns the ranks to the left and to the right on the ring.
func (d *LowPrecisionDecentralized) neighbours() (int, int) {
	return (d.rank + d.size - 1) % d.size, (d.rank + 1) % d.size
}

// inFlight is an exchange with both neighbours that has started.
type inFlight struct {
	ws   []Waiter
	copy func() // after the waits: fills what a single exchange stood for
}

// wait waits for every exchange, then makes the copy.
func (f inFlight) wait(ctx context.Context) error {
	var errs []error
	for _, w := range f.ws {
		if err := w.Wait(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if f.copy != nil {
		f.copy()
	}
	return nil
}

// both starts sending send to both neighbours, receiving the left one's
// into fromLeft and the right one's into fromRight: two exchanges in
// flight at once, or one where both neighbours are the same rank (two
// ranks), or none on a ring of one.
func (d *LowPrecisionDecentralized) both(send, fromLeft, fromRight *tensor.Tensor, name string) (inFlight, error) {
	l, r := d.neighbours()
	both := func() { copy(fromRight.Bytes(), fromLeft.Bytes()) }
	switch {
	case d.size == 1:
		copy(fromLeft.Bytes(), send.Bytes())
		return inFlight{copy: both}, nil
	case l == r:
		w, err := d.coll.ExchangeAsync(send, fromLeft, r, l, name)
		return inFlight{ws: []Waiter{w}, copy: both}, err
	}
	toRight, err := d.coll.ExchangeAsync(send, fromLeft, r, l, name+".right")
	if err != nil {
		return inFlight{}, err
	}
	toLeft, err := d.coll.ExchangeAsync(send, fromRight, l, r, name+".left")
	if err != nil {
		return inFlight{ws: []Waiter{toRight}}, err
	}
	return inFlight{ws: []Waiter{toRight, toLeft}}, nil
}

// payloadsSent is the number of payloads one communication sends: one to
// each neighbour, one on a ring of two, none on a ring of one.
func (d *LowPrecisionDecentralized) payloadsSent() int {
	return min(d.size-1, 2)
}

// Step is StepContext with context.Background.
func (d *LowPrecisionDecentralized) Step() error { return d.StepContext(context.Background()) }

// StepContext takes one step (see LowPrecisionDecentralized). It first
// waits for the neighbours' last differences and adds them to their
// replicas (Wait); the first step, and the first after SetState, set the
// replicas from the weights instead. A
// communicating step then sends this rank's difference and returns: the
// exchange goes on during the next forward and backward passes. If the
// difference cannot be quantized, StepContext returns the quantizer's
// error with the exchange (of a payload marked invalid) in flight.
func (d *LowPrecisionDecentralized) StepContext(ctx context.Context) error {
	if err := d.Wait(ctx); err != nil {
		return err
	}
	if err := d.setReplicas(ctx); err != nil {
		return err
	}
	communicates := d.Communicates()
	d.steps++
	if !communicates {
		return d.inner.Step()
	}
	pack(d.params, d.x)
	mix3(d.x, d.left, d.right)
	unpack(d.x, d.params)
	if err := d.inner.Step(); err != nil {
		return err
	}
	pack(d.params, d.x)
	qerr := d.encode()
	f, err := d.both(d.payload, d.fromL, d.fromR, "lowprec.diff")
	d.pending = &f
	if err != nil {
		return err
	}
	d.sent = d.payloadsSent() * d.payload.Len()
	if qerr != nil {
		return qerr
	}
	unpack(d.self, d.params)
	return nil
}

// setReplicas sets the replicas from the ranks' weights, exchanged in full
// precision, at the first step.
func (d *LowPrecisionDecentralized) setReplicas(ctx context.Context) error {
	if d.ready {
		return nil
	}
	pack(d.params, d.self)
	f, err := d.both(d.self, d.left, d.right, "lowprec.init")
	if err == nil {
		err = f.wait(ctx)
	}
	if err != nil {
		return err
	}
	d.ready = true
	return nil
}

// Wait waits for the exchange of the last communicating step, if it is
// still in flight, and adds the neighbours' differences to their
// replicas: after it, this rank's replicas equal its neighbours' weights.
// Call it after the last step (StepContext calls it first). It returns an
// error naming a neighbour whose difference was not finite.
func (d *LowPrecisionDecentralized) Wait(ctx context.Context) error {
	if d.pending == nil {
		return nil
	}
	if err := d.pending.wait(ctx); err != nil {
		if ctx.Err() == nil {
			d.pending = nil
		}
		return err
	}
	d.pending = nil
	l, r := d.neighbours()
	if err := d.decodeInto(d.left, d.fromL, l); err != nil {
		return err
	}
	return d.decodeInto(d.right, d.fromR, r)
}

// encode quantizes x − self, per parameter, into the payload and adds the
// dequantized difference to self. On a difference that is not finite it
// marks the payload invalid (a NaN first minimum, which the quantizer
// never returns), leaves self alone and returns the error.
func (d *LowPrecisionDecentralized) encode() error {
	diff(d.z, d.x, d.self)
	b, off, z := d.payload.Bytes(), 0, d.z
	for _, p := range d.params {
		n := p.Value.Len()
		q := b[off+8 : off+8+n]
		lo, hi, err := QuantizeMinMaxUint8(z[:n], q)
		if err != nil {
			binary.LittleEndian.PutUint32(b, math.Float32bits(float32(math.NaN())))
			return fmt.Errorf("optim: low-precision decentralized: parameter %q: %w", p.Name, err)
		}
		DequantizeMinMaxUint8(q, lo, hi, z[:n])
		binary.LittleEndian.PutUint32(b[off:], math.Float32bits(lo))
		binary.LittleEndian.PutUint32(b[off+4:], math.Float32bits(hi))
		off += 8 + n
		z = z[n:]
	}
	addTo(d.self, d.z)
	return nil
}

// decodeInto adds the difference in payload, from rank from, to replica.
func (d *LowPrecisionDecentralized) decodeInto(replica, payload *tensor.Tensor, from int) error {
	b, off, z := payload.Bytes(), 0, d.z
	if math.IsNaN(float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))) {
		return fmt.Errorf("optim: low-precision decentralized: rank %d sent no difference: its weights are not finite", from)
	}
	for _, p := range d.params {
		n := p.Value.Len()
		lo := math.Float32frombits(binary.LittleEndian.Uint32(b[off:]))
		hi := math.Float32frombits(binary.LittleEndian.Uint32(b[off+4:]))
		DequantizeMinMaxUint8(b[off+8:off+8+n], lo, hi, z[:n])
		off += 8 + n
		z = z[n:]
	}
	addTo(replica, d.z)
	return nil
}

// mix3 sets x to (x + l + r)/3.
func mix3(x, l, r *tensor.Tensor) {
	if x.DType() == tensor.Float32 {
		mix3Of(x.Float32s(), l.Float32s(), r.Float32s())
		return
	}
	mix3Of(x.Float64s(), l.Float64s(), r.Float64s())
}

func mix3Of[T float32 | float64](x, l, r []T) {
	for i := range x {
		x[i] = (x[i] + l[i] + r[i]) / 3
	}
}

// diff sets z to x − s, in float32.
func diff(z []float32, x, s *tensor.Tensor) {
	if x.DType() == tensor.Float32 {
		diffOf(z, x.Float32s(), s.Float32s())
		return
	}
	diffOf(z, x.Float64s(), s.Float64s())
}

func diffOf[T float32 | float64](z []float32, x, s []T) {
	for i := range z {
		z[i] = float32(x[i] - s[i])
	}
}

// addTo adds z to t.
func addTo(t *tensor.Tensor, z []float32) {
	if t.DType() == tensor.Float32 {
		addOf(t.Float32s(), z)
		return
	}
	addOf(t.Float64s(), z)
}

func addOf[T float32 | float64](t []T, z []float32) {
	for i := range t {
		t[i] += T(z[i])
	}
}

// SetState sets the wrapped optimizer's state and has the next step set
// the replicas again (they are not part of State).
func (d *LowPrecisionDecentralized) SetState(s *State) error {
	d.ready = false
	return d.inner.SetState(s)
}

var _ Optimizer = (*LowPrecisionDecentralized)(nil)
