package optim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/tensor"
)

// AsyncConfig configures AsyncModelAverage.
type AsyncConfig struct {
	// Interval is the time from the start of one averaging round to the
	// start of the next (Bagua's sync_interval_ms); it must be positive.
	Interval time.Duration
	// Now, if not nil, replaces time.Now (for tests).
	Now func() time.Time
}

// The names of AsyncModelAverage's collectives.
const (
	asyncRoundName = "async_model_average"
	asyncFinalName = "async_model_average.final"
)

// AsyncModelAverage is Bagua's asynchronous model average: every rank
// trains on its own, at its own pace, with the wrapped optimizer, and
// every Interval the ranks average their weights in the background. A
// round starts at a Step: the rank takes a snapshot of its weights and
// starts an allreduce (Average) of it, which the runtime's background loop
// performs while the rank goes on stepping; at the first Step after the
// round has completed, the rank applies x += mean − snapshot, which keeps
// the local progress it made during the round. The weights are therefore
// changed only inside Step, by the goroutine that trains.
//
// Abort and Resume are collective: every rank calls them, in any order and
// at any step, and none waits for a rank that has stopped stepping. A rank
// that aborts first joins the next round with a stop mark; every rank
// learns it from that round, which it completes like any other, and stops
// averaging after it (Paused). Finish aborts and then averages the weights
// once more, synchronously, so that every rank ends with the same weights,
// whatever number of steps each took; a rank that runs out of data first
// calls Finish and waits there for the others. A rank that fails stops
// the job, as any collective's failure does (the runtime's liveness
// checks bound the wait).
//
// Parameters must all be float32 or all float64. Use it from one goroutine.
type AsyncModelAverage struct {
	passThrough
	coll   Collectives
	cfg    AsyncConfig
	params []Param
	n      int

	buf, snap *tensor.Tensor // the round's weights and stop mark; the snapshot
	inflight  Waiter         // the round in flight, or nil
	last      time.Time      // when the last round started
	rounds    int            // rounds completed
	paused    bool
}

// NewAsyncModelAverage wraps inner (a plain optimizer over the model's
// parameters) in asynchronous model averaging over coll's ranks: give it a
// Collectives of its own process set (FromProcessSet) to keep its rounds
// apart from the other collectives of the program.
func NewAsyncModelAverage(inner Optimizer, coll Collectives, cfg AsyncConfig) (*AsyncModelAverage, error) {
	if inner == nil || coll == nil {
		return nil, fmt.Errorf("%w: nil optimizer or collectives", ErrAveraging)
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("%w: asynchronous averaging interval %v must be positive", ErrAveraging, cfg.Interval)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	params := inner.Params()
	dt, n, err := flatParams(params)
	if err != nil {
		return nil, err
	}
	return &AsyncModelAverage{passThrough: passThrough{inner}, coll: coll, cfg: cfg, params: params, n: n,
		buf: tensor.New(dt, n+1), snap: tensor.New(dt, n), last: cfg.Now()}, nil
}

// Rounds returns the number of averaging rounds completed.
func (a *AsyncModelAverage) Rounds() int { return a.rounds }

// Paused reports whether averaging has stopped (Abort, or another rank's
// Abort learnt from a round) and not resumed.
func (a *AsyncModelAverage) Paused() bool { return a.paused }

// BytesPerRound returns the bytes of weights one round allreduces.
func (a *AsyncModelAverage) BytesPerRound() int { return a.buf.Len() * a.buf.DType().Size() }

// Step is StepContext with context.Background.
func (a *AsyncModelAverage) Step() error { return a.StepContext(context.Background()) }

// StepContext applies the wrapped optimizer's step, then the result of a
// round that has completed, and starts the next round when it is due.
func (a *AsyncModelAverage) StepContext(ctx context.Context) error {
	if err := a.inner.Step(); err != nil {
		return err
	}
	if a.inflight != nil {
		if !completed(a.inflight) {
			return nil
		}
		if err := a.complete(ctx); err != nil {
			return err
		}
	}
	if a.paused || a.cfg.Now().Sub(a.last) < a.cfg.Interval {
		return nil
	}
	return a.start(0)
}

// completed reports, without waiting, whether w has completed.
func completed(w Waiter) bool {
	if p, ok := w.(interface{ Poll() bool }); ok {
		return p.Poll()
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	return !errors.Is(w.Wait(done), context.Canceled)
}

// start snapshots the weights and starts a round, with the stop mark.
func (a *AsyncModelAverage) start(stop float64) error {
	pack(a.params, a.snap)
	copy(a.buf.Bytes(), a.snap.Bytes())
	setElem(a.buf, a.n, stop)
	w, err := a.coll.AllreduceAsync(a.buf, asyncRoundName, Average, 1, 1)
	if err != nil {
		return err
	}
	a.inflight, a.last = w, a.cfg.Now()
	return nil
}

// complete waits for the round in flight and applies it. If ctx ends
// first, the round stays in flight.
func (a *AsyncModelAverage) complete(ctx context.Context) error {
	if err := a.inflight.Wait(ctx); err != nil {
		if ctx.Err() == nil {
			a.inflight = nil
		}
		return err
	}
	a.inflight = nil
	a.rounds++
	addDelta(a.params, a.buf, a.snap)
	if elem(a.buf, a.n) != 0 {
		a.paused = true
	}
	return nil
}

// Abort stops the background averaging on every rank: it completes the
// round in flight and, unless that round carried another rank's stop,
// joins the next round with its own. It returns at once when averaging is
// paused already.
func (a *AsyncModelAverage) Abort(ctx context.Context) error {
	if a.inflight != nil {
		if err := a.complete(ctx); err != nil {
			return err
		}
	}
	if a.paused {
		return nil
	}
	if err := a.start(1); err != nil {
		return err
	}
	return a.complete(ctx)
}

// Resume restarts the background averaging after Abort; every rank calls
// it, and the next round starts an Interval later.
func (a *AsyncModelAverage) Resume() {
	a.paused = false
	a.last = a.cfg.Now()
}

// Finish aborts the averaging and averages the weights once more,
// synchronously: every rank ends with the same weights. Every rank calls
// it once it has taken its last step.
func (a *AsyncModelAverage) Finish(ctx context.Context) error {
	if err := a.Abort(ctx); err != nil {
		return err
	}
	pack(a.params, a.snap)
	w, err := a.coll.AllreduceAsync(a.snap, asyncFinalName, Average, 1, 1)
	if err == nil {
		err = w.Wait(ctx)
	}
	if err != nil {
		return err
	}
	unpack(a.snap, a.params)
	return nil
}

// addDelta adds mean − snap (mean: the first elements of buf) to the
// parameters.
func addDelta(params []Param, buf, snap *tensor.Tensor) {
	off := 0
	for _, p := range params {
		n := p.Value.Len()
		if p.Value.DType() == tensor.Float32 {
			addDeltaOf(p.Value.Float32s(), buf.Float32s()[off:off+n], snap.Float32s()[off:off+n])
		} else {
			addDeltaOf(p.Value.Float64s(), buf.Float64s()[off:off+n], snap.Float64s()[off:off+n])
		}
		off += n
	}
}

func addDeltaOf[T float32 | float64](x, mean, snap []T) {
	for i := range x {
		x[i] += mean[i] - snap[i]
	}
}

func setElem(t *tensor.Tensor, i int, v float64) {
	if t.DType() == tensor.Float32 {
		t.Float32s()[i] = float32(v)
		return
	}
	t.Float64s()[i] = v
}

func elem(t *tensor.Tensor, i int) float64 {
	if t.DType() == tensor.Float32 {
		return float64(t.Float32s()[i])
	}
	return t.Float64s()[i]
}

var _ Optimizer = (*AsyncModelAverage)(nil)
