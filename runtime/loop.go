package runtime

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/cache"
	"github.com/gohorovod/gohorovod/runtime/internal/cycle"
	"github.com/gohorovod/gohorovod/runtime/internal/fusion"
	"github.com/gohorovod/gohorovod/runtime/internal/negotiate"
	"github.com/gohorovod/gohorovod/runtime/internal/schedule"
	"github.com/gohorovod/gohorovod/runtime/internal/stall"
	"github.com/gohorovod/gohorovod/runtime/internal/steps"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// loop is one process set's controller (Horovod's per-set controller):
// its communicator, queue, response cache, coordinator and fusion buffer.
// The background goroutine runs the global set's loop, whose cycle also
// runs the cycles of the other sets this rank is in (subs), in id order,
// so that every rank meets every set it shares with another in the same
// order: a cycle never waits on a set that another member reaches only
// after a set this one waits in. Only the goroutine touches a loop.
type loop struct {
	r          *Runtime
	com        comm.Communicator
	rank, size int // within the set
	q          *queue
	set        *pset   // the process set (set by initProcessSets and addSet)
	global     *loop   // a non-global set's loop: the global set's; nil on the global set
	subs       []*loop // the global set's loop: the other sets' loops, by id
	tune       *tuning // the global set's autotuning, or nil (autotune.go)
	cfg        config.Config
	log        loopLog
	stopReq    <-chan struct{}

	st        *cycle.State
	neg       *cycle.Negotiation // the slow path's exchange (drive.go)
	planner   fusion.Planner
	stall     *stall.Inspector
	tl        observer      // rank 0 while a timeline is written (timeline.go)
	p         *performer    // puts the agreed responses on the wire (performer.go)
	ctl       cycle.Control // the stop rule, the failure protocol, the tick
	performed bool          // the last cycle performed at least one response
	slow      bool          // the last cycle negotiated
	checker   comm.AgreementChecker
	testPanic atomic.Pointer[func()] // tests: called at the start of each cycle
	sc        static                 // the static schedule's state (static.go)

	cyc  cycleBufs // the cycle's working set
	ents []*entry  // the entries taken for the response being performed
}

// cycleBufs is what a cycle works on, reused from cycle to cycle.
type cycleBufs struct {
	msgs, back  []*entry // popped from the queue; sent back to its head
	items       []cycle.Item
	respEnts    []*entry // the entry of each response of the cycle, when known
	sources     []int    // indices in the cycle's responses of the response performed
	syncT, invT *tensor.Tensor
}

// newLoop makes the loop of the set whose communicator is com and whose
// queue is q (the global set's: r.com and &r.q).
func newLoop(r *Runtime, com comm.Communicator, q *queue) (*loop, error) {
	rank, size := com.Rank(), com.Size()
	l := &loop{
		r: r, com: com, rank: rank, size: size, q: q, cfg: r.cfg, log: loopLog{r.log}, stopReq: r.stopReq,
		planner: fusion.Planner{MaxFused: defaultMaxFusedBytes},
	}
	l.tl.log = &l.log.Logger
	l.p = newPerformer(com, &l.cfg, &r.stats, &l.log.Logger, r.gpu)
	isGlobal := q == &r.q
	// Negotiation guarantees that the ranks' arguments agree, so the
	// transport's own agreement check (one extra collective per call) is
	// off, except while negotiating.
	if c, ok := l.com.(comm.AgreementChecker); ok {
		l.checker = c
		c.SetCheck(false)
	}
	var coord *negotiate.Coordinator
	if l.rank == 0 {
		coord = negotiate.New(l.size)
	}
	s, warning := stall.New(stall.Config{Disabled: r.cfg.StallCheckDisable, Warn: r.cfg.StallCheckTime,
		Shutdown: r.cfg.StallShutdownTime})
	if warning != "" && l.rank == 0 && isGlobal {
		l.log.Warn().Msg(warning)
	}
	l.stall = s
	l.st = cycle.New(cache.New(r.cfg.CacheCapacity, rank), s)
	l.sc.sched = schedule.New(0)
	if isGlobal {
		l.sc.sched = schedule.New(r.cfg.StaticSchedule)
	}
	l.neg = cycle.NewNegotiation(rank, size, coord, s)
	if !isGlobal {
		return l, nil
	}
	if err := l.tl.open(l.cfg, l.rank); err != nil { // timeline.go
		return nil, err
	}
	return l, nil
}

// defaultChunkBytes is the largest buffer handed to one transport
// collective: larger tensors are reduced in chunks of this size, so that
// the transport's per-call temporaries stay in cache. Chosen by a sweep
// with cmd/hvdbench (docs/BENCHMARKS.md has the figures).
const defaultChunkBytes = 4 << 20

// defaultFusionChunkBytes is how much of a fused response is copied into
// the fusion buffer, reduced and copied out at a time, so that the bytes
// are still in the core's cache when the transport reads them and when
// they are copied back. Chosen by a sweep with cmd/hvdbench
// over many small tensors, which the C yardstick's fused mode agrees with
// (docs/BENCHMARKS.md).
const defaultFusionChunkBytes = 256 << 10

// defaultMaxFusedBytes is the largest tensor copied into the fusion buffer;
// larger ones are reduced in place, which saves two copies that cost more
// than the transport call they would share. Chosen by a sweep with
// cmd/hvdbench over ResNet-50's gradients (docs/BENCHMARKS.md has the
// figures).
const defaultMaxFusedBytes = 64 << 10

func (l *loop) run() {
	var cause error
	defer func() {
		l.tl.close(time.Now())
		// Reject new calls with the cause before any handle completes:
		// a caller that sees its handle fail must find the runtime
		// stopped. Then the queue's handles, and those of the response
		// a failure hit (taken out of the queue already).
		l.r.loopExited(cause)
		err := &shutdownError{cause: cause}
		l.r.q.close(err)
		l.ents = failEntries(l.ents, err)
		l.p.closeHier()
		if l.tune != nil && l.tune.t != nil {
			l.tune.closeLog(l)
		}
		for _, s := range l.subs {
			s.q.close(err)
			s.ents = failEntries(s.ents, err)
			if cerr := s.closeSet(); cerr != nil {
				l.log.Debug().Err(cerr).Int("process_set", s.set.id).Msg("closing a process set's communicator")
			}
		}
		close(l.r.stopped)
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	next := time.Now()
	for {
		// Sleep until the tick unless a caller waits on names still
		// in flight (see Handle.Wait).
		if d := time.Until(next); cycle.Sleep(d, l.sc.staticIdle, l.hot()) {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-l.r.q.wake:
				// A group of requests arrived: start the cycle now
				// rather than at the tick.
				if !timer.Stop() {
					<-timer.C
				}
			}
		}
		t0 := time.Now()
		stop, err := l.safeCycle()
		next = l.ctl.NextTick(l.cfg.CycleTime, l.sc.staticIdle, l.sc.staticWake)
		for _, s := range l.subs {
			l.performed = l.performed || s.performed
			l.slow = l.slow || s.slow
		}
		busy := int64(time.Since(t0))
		st := &l.r.stats
		st.cycles.Add(1)
		if l.performed {
			st.active.Add(1)
			st.activeNs.Add(busy)
			if !l.slow {
				st.cached.Add(1)
				st.cachedNs.Add(busy)
			}
		} else {
			st.idleNs.Add(busy)
		}
		if err != nil {
			cause = l.fail(err)
			return
		}
		if stop {
			cause = l.farewell()
			if cause == nil {
				l.log.Debug().Msg("background loop stopping: shutdown requested")
			}
			return
		}
	}
}

// safeCycle runs one cycle, turning a panic into a *PanicError (the stack
// goes to the log).
func (l *loop) safeCycle() (stop bool, err error) {
	l.ctl.BeginCycle()
	defer func() {
		if p := recover(); p != nil {
			pe := &PanicError{Value: p, Stack: debug.Stack()}
			l.log.Error().Str("stack", string(pe.Stack)).Msgf("Horovod background loop panicked: %v", p)
			stop, err = false, pe
		}
	}()
	if f := l.testPanic.Load(); f != nil {
		(*f)()
	}
	stop, err = l.cycle()
	if err != nil || stop {
		return stop, err
	}
	clear(l.ents)
	// The other sets this rank is in, in id order (see loop). A set added
	// or removed by this cycle's registrations is in l.subs already, or
	// gone from it, on every rank alike.
	for i := 0; i < len(l.subs); i++ {
		s := l.subs[i]
		s.tl.w = l.tl.w
		if f := s.testPanic.Load(); f != nil {
			(*f)()
		}
		if _, err := s.cycle(); err != nil {
			return false, fmt.Errorf("process set %d: %w", s.set.id, err)
		}
		clear(s.ents)
	}
	return false, nil
}

// hot reports whether a caller waits on any set's names in flight.
func (l *loop) hot() bool {
	if l.q.hot() {
		return true
	}
	for _, s := range l.subs {
		if s.q.hot() {
			return true
		}
	}
	return false
}

// fail handles an error that stops this rank's loop, and returns the root
// cause the rank's handles and later calls report (run fails them: the
// queue's, and those of the response being performed, whose entries have
// left the queue). What to do is cycle.Control's decision (Fail): tell the
// others in one more cycle and the farewell exchange, or abort the
// transport with the cause where it can be (comm.Aborter), or leave a
// group that a peer's failure has torn down already.
func (l *loop) fail(err error) error {
	l.log.Error().Err(err).Msg("Horovod background loop uncaught exception")
	var peer *comm.PeerError
	act := l.ctl.Fail(err, errors.As(err, &peer))
	if act == cycle.TellOthers {
		stop, ferr := l.safeCycle() // takes nothing: it stops before performing
		if ferr == nil && stop {
			return l.farewell() // never nil: this rank's record says it failed
		}
		if ferr != nil {
			l.log.Error().Err(ferr).Msg("telling the other ranks")
		}
		act = cycle.Abort
	}
	if a, ok := l.com.(comm.Aborter); ok && act == cycle.Abort {
		if aerr := a.Abort(err); aerr != nil {
			l.log.Error().Err(aerr).Msg("aborting the transport")
		}
	}
	return err
}

// failEntries fails the handles of ents, the entries taken for the
// response being performed (a fused response's, or one tensor's), and
// returns ents emptied.
func failEntries(ents []*entry, err error) []*entry {
	for _, e := range ents {
		if e != nil && e.h != nil {
			e.h.fail(err)
		}
	}
	return ents[:0]
}

// farewell runs once every rank has agreed to stop: each rank tells the
// others why it stops (nothing, Shutdown called, the stall inspector, a
// failure), so that every rank's handles and later calls report the same
// root cause (cycle.Control.Resolve): the lowest failing rank's error, or
// else which rank called Shutdown. It returns that cause (nil on the rank
// that called Shutdown, when no rank failed).
func (l *loop) farewell() error {
	recs, err := steps.Gather(l.com, wire.AppendFarewell(nil, l.ctl.Farewell(closed(l.stopReq))))
	if err != nil {
		err = fmt.Errorf("gathering farewells: %w", err)
		l.log.Error().Err(err).Msg("farewell exchange")
	}
	o := l.ctl.Resolve(recs, l.rank, err)
	if o.Own != nil || !o.Found {
		return o.Own
	}
	re := rankError(o.Cause)
	if re.Stall {
		dumpStacks(l.log.Logger, "the stall inspector on rank 0 stopped the job")
	}
	if !re.Shutdown {
		l.log.Error().Err(re).Msg("stopping: another rank failed")
	}
	return re
}

// stopping is the stop rule: this rank asks the others to stop when
// Shutdown was called, a stall ended the job, or a collective failed.
func (l *loop) stopping() bool { return l.ctl.Stopping(closed(l.stopReq)) }

// closed reports whether ch is closed (Shutdown closes the loop's stopReq).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// agreeAllreduce is the agreement's bitwise-AND allreduce. This is where a
// rank waits for peers that are still computing (backward has not yet
// produced the bucket they are to agree on), so where the communicator
// can wait without spinning (comm.PatientAllreducer, over MPI) it does,
// sleeping up to AgreementSleepMax between tests: a spinning wait takes
// the core from the computation it waits for.
func agreeAllreduce(com comm.Communicator, cfg *config.Config, t *tensor.Tensor) error {
	if p, ok := com.(comm.PatientAllreducer); ok && cfg.AgreementSleepMax > 0 {
		return p.AllreducePatient(t, tensor.BitAnd, cfg.AgreementSleepMax)
	}
	return com.Allreduce(t, tensor.BitAnd)
}

// openDoorbell gives the agreement's patient waits the node's doorbell
// (comm.Doorbeller) where the agreed configuration asks for one: a rank
// that waits for peers on its node then sleeps until the last of them
// arrives and is woken by it, instead of spinning and then sleeping on a
// timer. It is collective, and every rank reaches it with the same
// configuration. A doorbell that cannot be set up is no failure: the
// waits keep their timers on every rank, and rank 0 says why.
func openDoorbell(com comm.Communicator, cfg config.Config, log zerolog.Logger) {
	d, ok := com.(comm.Doorbeller)
	if !ok || !cfg.AgreementDoorbell || cfg.AgreementSleepMax <= 0 {
		return
	}
	if err := d.EnableDoorbell(); err != nil && com.Rank() == 0 {
		log.Warn().Err(err).Msg("the agreement waits for peers on its timer, without the node's doorbell")
	}
}

// words wraps a []uint64 in a reusable tensor.
func wordsTensor(t **tensor.Tensor, w []uint64) *tensor.Tensor {
	if *t == nil || (*t).Len() != len(w) || &(*t).Uint64s()[0] != &w[0] {
		*t = tensor.FromUint64(w)
	}
	return *t
}

// cycle runs one negotiation and performs what is ready. It returns true
// when every rank must stop. The decisions are cycle.State's; this function
// does the I/O between them.
func (l *loop) cycle() (bool, error) {
	now := time.Now()
	isGlobal := l.global == nil
	if isGlobal {
		l.tl.apply(&l.r.tlc, now) // StartTimeline, StopTimeline (timeline.go)
		l.tl.mark(now)
	}
	l.p.timing = l.tl.on() // the performer records its phases only for a timeline
	l.performed, l.slow = false, false
	defer l.forget()
	if l.sc.sched.Active() {
		// The static schedule (static.go): no agreement this cycle,
		// unless the schedule dissolves in it.
		if done, err := l.staticCycle(); done || err != nil {
			return false, err
		}
	}
	l.cyc.pop(l.q)
	// Only the global set decides to stop; the other sets' cycles run
	// after its cycle, and not at all once it has stopped.
	stopping := isGlobal && l.stopping()
	if isGlobal {
		if capacity, ok := l.tune.cacheSwitch(); ok { // autotune.go
			l.st.SetCache(cache.New(capacity, l.rank))
		}
	}
	words := l.st.Begin(l.cyc.items, stopping)
	if len(l.cyc.msgs) > 0 && l.log.Trace().Enabled() {
		l.log.traceStart(len(l.cyc.msgs), words)
	}
	for i, e := range l.cyc.msgs {
		e.bit = l.cyc.items[i].Bit
	}
	if l.stall.Enabled() {
		l.inspectStall(now, isGlobal)
	}
	d, invalidated, err := l.agreeOn(now, words, isGlobal)
	if err != nil {
		return false, err
	}
	l.cyc.sort(d)
	if d.Negotiate {
		if err := l.negotiate(d); err != nil { // drive.go
			return false, err
		}
	}
	l.q.pushFront(l.cyc.back)
	if d.Shutdown {
		// Every rank stops; pending operations fail with the cause that
		// the farewell exchange finds.
		return true, nil
	}
	if isGlobal {
		// Before performing: learn reads the entries' handles, which
		// their callers reuse once the handles complete.
		l.learn(d, invalidated)
	}
	return false, l.performAll(d.Responses)
}

// inspectStall runs rank 0's stall inspection of the cycle at now, and
// carries out what it decides: a warning, or stopping the job in this
// cycle (the global set) or the global set's next one.
func (l *loop) inspectStall(now time.Time, isGlobal bool) {
	l.st.StaleCached(now)
	set := 0
	if !isGlobal {
		set = l.set.id
	}
	msg, act, ok := l.neg.Stalled(now, set)
	if !ok {
		return
	}
	switch act {
	case cycle.StallStop:
		l.log.Error().Msg(msg)
		l.ctl.Stall(&StallError{Message: msg})
		dumpStacks(l.log.Logger, "the stall inspector is shutting the job down")
		l.st.Stop()
	case cycle.StallStopNext:
		// The global set's next cycle stops every rank.
		l.log.Error().Msg(msg)
		l.global.ctl.Stall(&StallError{Message: msg})
		dumpStacks(l.log.Logger, "the stall inspector is shutting the job down")
	default:
		l.log.Warn().Msg(msg)
	}
}

// agreeOn runs the cycle's agreement on this rank's vector words: one
// bitwise-AND allreduce, plus an OR when some rank found a cached entry
// with changed parameters (invalidated). Until this rank enters it, it is
// where every other rank is (at the start of a cycle): a failure before can
// still be told to the others (see fail). Once in a collective, a transport
// error leaves the ranks' states unknown: no more collectives are tried.
func (l *loop) agreeOn(now time.Time, words []uint64, isGlobal bool) (d *cycle.Decision, invalidated bool, err error) {
	l.ctl.EnterCollective()
	if isGlobal {
		if err := l.syncTuning(); err != nil { // autotune.go
			return nil, false, err
		}
	}
	if err := agreeAllreduce(l.com, &l.cfg, wordsTensor(&l.cyc.syncT, words)); err != nil {
		return nil, false, fmt.Errorf("cache agreement: %w", err)
	}
	l.ctl.Synced(time.Now())
	inv := l.st.Agreed()
	if inv != nil {
		if err := l.com.Allreduce(wordsTensor(&l.cyc.invT, inv), tensor.BitOr); err != nil {
			return nil, false, fmt.Errorf("cache invalidation: %w", err)
		}
		if l.log.Debug().Enabled() {
			l.log.logInvalidated(inv, l.st.Cache())
		}
	}
	d = l.st.Decide(now)
	if (len(l.cyc.msgs) > 0 || len(d.Responses) > 0 || d.Negotiate || d.Shutdown) && l.log.Trace().Enabled() {
		l.log.traceAgreed(len(l.cyc.msgs), words, d)
	}
	l.neg.CachedProgress(now, len(d.Responses))
	return d, inv != nil, nil
}

// pop takes the queue's requests for the cycle.
func (b *cycleBufs) pop(q *queue) {
	b.msgs = q.pop(b.msgs[:0])
	b.items = b.items[:0]
	for _, e := range b.msgs {
		b.items = append(b.items, cycle.Item{Req: &e.req, Bit: e.bit})
	}
}

// sort sorts the popped entries by d: beside each cached response the
// entry it performs (nil where this rank has joined and submitted nothing),
// so that the entries are taken without looking their names up (see
// entries); and the entries that go back to the queue.
func (b *cycleBufs) sort(d *cycle.Decision) {
	b.respEnts = b.respEnts[:0]
	for _, i := range d.Items {
		var e *entry
		if i != cycle.None {
			e = b.msgs[i]
		}
		b.respEnts = append(b.respEnts, e)
	}
	b.back = b.back[:0]
	for _, i := range d.Back {
		b.back = append(b.back, b.msgs[i])
	}
}

// performAll fuses the cycle's responses, whose entries l.cyc.respEnts holds
// where known, and performs them.
func (l *loop) performAll(resps []wire.Response) error {
	plan := l.planner.Plan(resps, l.cfg.FusionThreshold)
	if len(resps) > 1 && l.log.Debug().Enabled() {
		l.log.logPlan(resps, plan, l.planner.MaxFused, l.cfg.FusionThreshold)
	}
	for k, resp := range plan {
		l.performed = true
		l.cyc.sources = l.planner.Sources(k)
		l.ents = l.ents[:0]
		if err := l.perform(&resp); err != nil {
			return err
		}
	}
	if l.global == nil {
		l.tune.observe(resps)
	}
	l.tl.flush()
	return nil
}

// forget drops the cycle's references to entries, which hold the callers'
// tensors: the slices are reused, and what they held past the cycle would
// keep memory the callers have let go of alive.
func (l *loop) forget() {
	clear(l.cyc.msgs)
	clear(l.cyc.items)
	clear(l.cyc.back)
	clear(l.cyc.respEnts)
	// l.ents is cleared by safeCycle: when the cycle fails, fail needs
	// the entries taken for the response it failed in.
}
