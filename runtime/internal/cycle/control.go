package cycle

import (
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// Control is one rank's stop and failure state from cycle to cycle, and the
// decisions the loop takes from it: the stop rule (Stopping), the failure
// protocol (Fail), the farewell record and the root cause every rank
// reports (Farewell, Resolve), and the tick policy (NextTick, Sleep). Like
// State it does no I/O: errors are values it holds and compares, the clock
// is the caller's.
type Control struct {
	failing  error     // this rank failed where the others can still be told
	stalled  error     // the stall inspector stopped the job
	aligned  bool      // no collective entered yet this cycle
	syncedAt time.Time // when the last agreement returned
}

// Stopping is the stop rule: this rank asks the others to stop when
// Shutdown was called (shutdown), its stall inspector ended the job, or it
// failed where the others can still be told.
func (c *Control) Stopping(shutdown bool) bool {
	return shutdown || c.stalled != nil || c.failing != nil
}

// BeginCycle records that a cycle starts: no collective entered yet, so a
// failure now finds every other rank where this one is.
func (c *Control) BeginCycle() { c.aligned = true }

// EnterCollective records that this rank entered a collective of the cycle
// (the agreement, or a static schedule's header): from here a failure
// leaves the ranks out of step.
func (c *Control) EnterCollective() { c.aligned = false }

// Synced records that the cycle's agreement returned at t: where the ranks
// met.
func (c *Control) Synced(t time.Time) { c.syncedAt = t }

// Stall records that the stall inspector stopped the job with err (the
// first verdict is kept): Stopping is true from now on.
func (c *Control) Stall(err error) {
	if c.stalled == nil {
		c.stalled = err
	}
}

// FailAction is what a rank does about an error that stops its loop.
type FailAction int

const (
	// TellOthers: the failure came before this rank entered any
	// collective of the cycle, so every other rank waits for it in the
	// cycle's agreement. One more cycle asks them to stop (Stopping is
	// true now), and the farewell exchange tells them which rank failed
	// and why. When that cycle fails too, Abort.
	TellOthers FailAction = iota
	// Abort: the ranks are out of step; tear the transport down with the
	// cause so that no rank waits for ever.
	Abort
	// Leave: a peer's failure has torn the group down already, on every
	// rank; aborting again would only race the root cause with a second
	// one naming this rank.
	Leave
)

// String names the action.
func (a FailAction) String() string {
	switch a {
	case TellOthers:
		return "tell the others"
	case Abort:
		return "abort"
	case Leave:
		return "leave"
	}
	return "unknown"
}

// Fail decides what to do with err, an error that stops this rank's loop;
// peer reports that the transport blames another rank for it (a
// comm.PeerError). Only the first failure is told to the others.
func (c *Control) Fail(err error, peer bool) FailAction {
	switch {
	case peer:
		return Leave
	case c.aligned && c.failing == nil:
		c.failing = err
		return TellOthers
	}
	return Abort
}

// Farewell returns the record this rank gives the others once every rank
// has agreed to stop (see FarewellOf); shutdown reports whether Shutdown
// was called on this rank.
func (c *Control) Farewell(shutdown bool) wire.Farewell {
	return FarewellOf(c.failing, c.stalled, shutdown)
}

// Outcome is the root cause a rank reports for a stop: its own error, or
// another rank's farewell, or nothing (a clean shutdown this rank asked
// for).
type Outcome struct {
	// Own, when not nil, is this rank's own error, as it was raised: the
	// cause is this rank's failure or its stall verdict, or the farewell
	// exchange failed.
	Own error
	// Cause is the rank whose farewell is the root cause, when Found.
	Cause Cause
	Found bool
}

// Resolve decides the root cause this rank (me) reports from every rank's
// farewell record, or, when the exchange of the records failed
// (exchangeErr), from what this rank knows: its failure, else its stall
// verdict, else the exchange's error.
func (c *Control) Resolve(recs [][]byte, me int, exchangeErr error) Outcome {
	if exchangeErr != nil {
		if own := c.own(); own != nil {
			return Outcome{Own: own}
		}
		return Outcome{Own: exchangeErr}
	}
	cause, ok := FarewellCause(recs, me)
	if !ok {
		return Outcome{}
	}
	if cause.Rank == me {
		if own := c.own(); own != nil {
			return Outcome{Own: own}
		}
	}
	return Outcome{Cause: cause, Found: true}
}

// own is this rank's own reason to stop: its failure first.
func (c *Control) own() error {
	if c.failing != nil {
		return c.failing
	}
	return c.stalled
}

// NextTick returns when the next cycle starts: a cycle time after the last
// agreement returned, where the ranks met, so that their cycles stay in
// phase and no rank waits in the next agreement for a peer that is still
// asleep; or, when the static schedule is idle, the schedule's own wake
// time.
func (c *Control) NextTick(cycle time.Duration, staticIdle bool, staticWake time.Time) time.Time {
	if staticIdle {
		return staticWake
	}
	return c.syncedAt.Add(cycle)
}

// Sleep reports whether the loop sleeps for wait before its next cycle:
// when the tick is still ahead and no caller waits on names in flight
// (hot); an idle static schedule sleeps even then, since every request
// wakes it.
func Sleep(wait time.Duration, staticIdle, hot bool) bool {
	return wait > 0 && (staticIdle || !hot)
}
