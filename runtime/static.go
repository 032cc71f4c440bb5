package runtime

import (
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/cache"
	"github.com/gohorovod/gohorovod/runtime/internal/cycle"
	"github.com/gohorovod/gohorovod/runtime/internal/schedule"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// staticTiming is how long a rank on the static schedule waits before it
// joins a header without being ready (see schedule.Timing): a heartbeat
// often enough that a ready rank waits for an idle peer's header no longer
// than a few training steps, a patience long enough that only a peer that
// has stopped following the schedule (or a step that much slower on one
// rank) ends it, and a caller's wait on an incomplete unit short enough
// that a program that waits on a later unit first (a synchronous call, a
// reordered one) is back on negotiation at once.
var staticTiming = schedule.Timing{
	Heartbeat: 50 * time.Millisecond,
	Patience:  time.Second,
	Stuck:     20 * time.Millisecond,
}

// static is the global loop's static schedule (runtime/internal/schedule)
// and what the loop keeps for it between cycles.
type static struct {
	sched *schedule.Schedule
	// pend holds the entries taken from the queue while the schedule is
	// on and not yet performed (a later unit's, queued early), and
	// classified how many of them have been looked up in the cache.
	pend       []*entry
	classified int
	deviant    bool     // a pending entry is outside the schedule
	starts     []int    // learn: where the cycle's units begin
	pendEnt    []*entry // by cache bit: the request pending at it, or nil
	hdr        []uint64
	hdrT       *tensor.Tensor
	resps      []wire.Response
	offsets    []int           // performUnits: where each unit's responses begin
	clocks     schedule.Clocks // the last header, ready and stuck since
	// staticIdle: the last cycle ran on the schedule and had nothing to
	// do; the loop sleeps to staticWake, even while a caller waits, unless
	// the queue wakes it (every request does while the schedule is
	// locked: queue.eager).
	staticIdle bool
	staticWake time.Time
}

// staticAllowed reports whether the global loop may lock a schedule now:
// with a response cache, no other process set (whose cycles run inside the
// global set's, at its agreement) and no autotuning in progress (its
// broadcast rides on every cycle). Every rank answers alike.
func (l *loop) staticAllowed() bool {
	if l.global != nil || l.st.Cache().Capacity() == 0 || len(l.subs) > 0 {
		return false
	}
	if l.tune != nil && (l.tune.sync.Active() || l.tune.switchCache) {
		return false
	}
	l.r.psMu.Lock()
	n := len(l.r.psets)
	l.r.psMu.Unlock()
	return n <= 1
}

// learn shows the static schedule what a global cycle performed from the
// cache (d.Bits, in the order every rank performed them); a cycle that
// negotiated, invalidated entries or ran with a joined rank breaks the
// pattern.
func (l *loop) learn(d *cycle.Decision, invalidated bool) {
	if d.Negotiate || invalidated || d.AllJoined || l.st.Joined() {
		l.sc.sched.Reset()
		return
	}
	if len(d.Bits) == 0 {
		return // an idle cycle: nothing to learn, and no lock taken
	}
	if !l.staticAllowed() {
		l.sc.sched.Reset()
		return
	}
	// A unit ends where one call's requests end and another's begin
	// (a bucket of the optimizer is one grouped call).
	l.sc.starts = l.sc.starts[:0]
	for k := 1; k < len(d.Bits); k++ {
		if a, b := l.cyc.respEnts[k-1], l.cyc.respEnts[k]; a == nil || b == nil || a.h != b.h {
			l.sc.starts = append(l.sc.starts, k)
		}
	}
	if l.sc.sched.ObserveUnits(d.Bits, l.sc.starts) {
		l.q.eager.Store(true)
		l.r.stats.staticLocks.Add(1)
		l.sc.clocks.Locked(time.Now())
		l.log.Debug().Int("units", len(l.sc.sched.Units())).Msg("static schedule locked")
	}
}

// staticCycle is a cycle of the global loop while the static schedule is
// locked: it takes the queue's new requests and, when the next unit's
// tensors are all queued here (or this rank must leave the schedule, or its
// heartbeat is due), joins the header with the other ranks; it performs
// every unit the headers agree on. done is false when the schedule
// dissolved in this cycle: the pending requests are back in the queue, and
// the caller runs a negotiated cycle now, as every rank does.
func (l *loop) staticCycle() (done bool, err error) {
	l.sc.staticIdle = false
	for {
		now := time.Now()
		stopping := l.stopping()
		l.sc.pend = l.q.pop(l.sc.pend)
		l.sc.classify(l.st.Cache())
		run := 0
		if !l.sc.deviant {
			run = l.sc.sched.ReadyRun(l.sc.pending)
		}
		ready := run > 0
		loc := l.sc.clocks.Observe(now, l.sc.deviant || stopping, ready, l.q.hot())
		vote, join := schedule.Choose(loc, staticTiming)
		if !join {
			// Nothing to do until a request arrives (the queue
			// wakes the loop), the heartbeat is due, or a waiting
			// caller has waited long enough to end the schedule.
			l.sc.staticIdle = true
			l.sc.staticWake = l.sc.clocks.Wake(staticTiming)
			return true, nil
		}
		inRun := 0
		if ready {
			inRun = l.sc.runOfMemory(run, l.st.Cache())
		}
		hdr := l.sc.sched.Header(vote, run, inRun, l.sc.hdr)
		l.sc.hdr = hdr
		l.ctl.EnterCollective()
		if err := agreeAllreduce(l.com, &l.cfg, wordsTensor(&l.sc.hdrT, hdr)); err != nil {
			return true, fmt.Errorf("static schedule header: %w", err)
		}
		joined := time.Now()
		l.ctl.Synced(joined)
		l.sc.clocks.Joined(joined)
		switch outcome, n := schedule.Resolve(hdr); outcome {
		case schedule.Perform:
			if err := l.performUnits(now, n, schedule.RunOf(hdr) >= n); err != nil {
				return true, err
			}
			l.sc.clocks.Performed()
		case schedule.Retry:
			if vote != schedule.Ready {
				return true, nil
			}
			// Ready: straight into the next header, where the
			// others come as they get ready.
		case schedule.Dissolve:
			l.dissolve(vote, loc)
			return false, nil
		}
	}
}

// classify looks the newly pending requests up in the cache and marks
// their bits pending: a request that is not a hit (a new name, a changed
// shape, a join, a barrier, a control request) or whose bit is in no unit
// is outside the schedule.
func (s *static) classify(c *cache.Cache) {
	if n := c.Bits(); len(s.pendEnt) < n {
		s.pendEnt = append(s.pendEnt, make([]*entry, n-len(s.pendEnt))...)
	}
	for _, e := range s.pend[s.classified:] {
		st, bit := c.LookupHint(&e.req, e.bit)
		e.bit = bit
		if st != cache.Hit || e.setOp != nil || !s.sched.Scheduled(bit) {
			s.deviant = true
			continue
		}
		s.pendEnt[bit] = e
	}
	s.classified = len(s.pend)
}

// pending reports whether a request at cache bit is pending.
func (s *static) pending(bit int) bool { return bit < len(s.pendEnt) && s.pendEnt[bit] != nil }

// runOfMemory returns how many of the ready units from the current one on
// (ready of them) lie, in the units' order, in one run of host memory on
// this rank, with nothing between their tensors: allreduces in place of one
// element type, reduction and scaling, each tensor following the one
// before in one allocation (tensor.Follows), as the gradients of an
// optimizer's flat buffer do. The header carries the count, and units that
// every rank has in one run are reduced in one call where they lie
// (performRun): no fusion plan, no copies, and no agreement on the layout.
func (s *static) runOfMemory(ready int, c *cache.Cache) int {
	units, slot := s.sched.Units(), s.sched.Slot()
	var first *wire.Response
	var prev *tensor.Tensor
	size, room := 0, 0 // bytes so far; the first tensor's capacity, which must hold them
	for k := range ready {
		for _, bit := range units[slot+k] {
			e, r := s.pendEnt[bit], c.Get(bit)
			if e == nil || wire.RequestType(r.Type) != wire.Allreduce || e.in != e.out || e.in.NumBytes() == 0 {
				return k
			}
			if first == nil {
				if e.in.Device().Kind != tensor.CPU {
					return k
				}
				first, room = r, cap(e.in.Bytes())
			} else if r.DType != first.DType || r.Op != first.Op || r.Prescale != first.Prescale ||
				r.Postscale != first.Postscale || !tensor.Follows(e.in, prev) {
				return k
			}
			size += e.in.NumBytes()
			prev = e.in
		}
		if size > room {
			// Each tensor follows the one before within that one's
			// capacity, but the first one's does not reach this far.
			return k
		}
	}
	return ready
}

// performUnits performs n units from the current one on, fused as one
// cycle's responses, in the units' order (every rank fuses them alike), from
// the cache entries, and advances the schedule. inRun: every rank has the
// units in one run of memory (runOfMemory), and they are reduced there in
// one call.
func (l *loop) performUnits(now time.Time, n int, inRun bool) error {
	units := l.sc.sched.Units()
	slot := l.sc.sched.Slot()
	c := l.st.Cache()
	// The entry of each response: unit u's bits begin at offsets[u-slot].
	l.sc.offsets = l.sc.offsets[:0]
	total := 0
	for _, u := range units[slot : slot+n] {
		l.sc.offsets = append(l.sc.offsets, total)
		total += len(u)
	}
	// A run needs only its first response (runOfMemory checked that the
	// others match it); the fused path, every one.
	l.sc.resps = l.sc.resps[:0]
	if !inRun {
		for _, u := range units[slot : slot+n] {
			for _, bit := range u {
				l.sc.resps = append(l.sc.resps, *c.Get(bit))
			}
		}
	}
	if cap(l.cyc.respEnts) < total {
		l.cyc.respEnts = make([]*entry, total)
	} else {
		l.cyc.respEnts = l.cyc.respEnts[:total]
		clear(l.cyc.respEnts)
	}
	kept := l.sc.pend[:0]
	for _, e := range l.sc.pend {
		if u := l.sc.sched.UnitOf(e.bit); u >= slot && u < slot+n {
			l.cyc.respEnts[l.sc.offsets[u-slot]+l.sc.sched.Pos(e.bit)] = e
			l.sc.pendEnt[e.bit] = nil
			continue
		}
		kept = append(kept, e)
	}
	clear(l.sc.pend[len(kept):])
	l.sc.pend, l.sc.classified = kept, len(kept)
	l.neg.CachedProgress(now, total)
	first := c.Get(units[slot][0])
	l.sc.sched.Advance(n)
	l.r.stats.staticUnits.Add(int64(n))
	if inRun {
		return l.performRun(first, l.cyc.respEnts)
	}
	return l.performAll(l.sc.resps)
}

// dissolve leaves the schedule on this rank, as every rank does after the
// same header: the pending requests go back to the head of the queue, in
// order, for the negotiated cycle that follows.
func (l *loop) dissolve(vote schedule.Vote, loc schedule.Local) {
	l.sc.sched.Dissolve()
	l.q.eager.Store(false)
	l.r.stats.staticDissolved.Add(1)
	l.q.pushFront(l.sc.pend)
	clear(l.sc.pend)
	clear(l.sc.pendEnt)
	l.sc.pend, l.sc.classified, l.sc.deviant = l.sc.pend[:0], 0, false
	l.sc.clocks.Dissolved()
	if l.log.Debug().Enabled() {
		l.log.Debug().Str("vote", vote.String()).Bool("deviant", loc.Deviant).Dur("ready_for", loc.ReadyFor).
			Dur("stuck_for", loc.StuckFor).Int("need", l.sc.sched.Need()).Msg("static schedule dissolved")
	}
}
