package schedule

import (
	"math/bits"
	"slices"
	"time"
)

// Vote is what one rank says in a header.
type Vote uint8

const (
	// Ready: every tensor of the current unit is queued on this rank.
	Ready Vote = iota
	// Wait: nothing is ready; this rank joins the header so that a rank
	// that is ready does not wait alone (a heartbeat).
	Wait
	// Leave: this rank must go back to negotiation (a request outside
	// the schedule, a unit that cannot complete, a rank that must stop).
	Leave
)

func (v Vote) String() string {
	switch v {
	case Ready:
		return "ready"
	case Wait:
		return "wait"
	case Leave:
		return "leave"
	}
	return "vote?"
}

// Outcome is what every rank does after a header: the same on every rank,
// since it depends only on the combined words.
type Outcome uint8

const (
	// Perform: every rank is ready for the same unit: perform it, then
	// Advance.
	Perform Outcome = iota
	// Retry: some rank is not ready yet and none asked to leave: the
	// ready ranks join the next header at once, the others when they are
	// ready or at their next heartbeat.
	Retry
	// Dissolve: some rank asked to leave, or the ready ranks named
	// different units: every rank leaves the schedule (Dissolve) and
	// negotiates from its next cycle on.
	Dissolve
)

func (o Outcome) String() string {
	switch o {
	case Perform:
		return "perform"
	case Retry:
		return "retry"
	case Dissolve:
		return "dissolve"
	}
	return "outcome?"
}

// readyWords is the length of a header's ready count, a thermometer code
// (the lowest k bits set for k units), so that the AND of the ranks'
// counts is the least of them: the ranks fuse that many units at once.
const readyWords = 16

// MaxFused is the most units one header performs.
const MaxFused = 64 * readyWords

// HeaderWords is the length of a header: the fingerprint and its
// complement, the status word, the ready count, and the run count (how
// many units from the current one on lie in one run of memory on this
// rank, a thermometer code like the ready count).
const HeaderWords = 3 + 2*readyWords

// runStart is where a header's run count begins.
const runStart = 3 + readyWords

// The status word's bits, combined by AND: each is set by the votes that
// keep it.
const (
	allReady  = 1 << iota // cleared by Wait and Leave: every rank is ready
	noneReady             // cleared by Ready: no rank is ready
	stay                  // cleared by Leave: no rank leaves
)

// maxNeed bounds the backoff of Repeats after schedules that dissolved
// soon after locking.
const maxNeed = 64

// Schedule is one rank's static schedule of one process set: learning
// while unlocked, then the units, the current slot and the fingerprints.
// Its zero value never locks; use New.
type Schedule struct {
	repeats int // rounds in a row before locking; 0: never
	need    int // repeats, raised after schedules that did not last

	// Learning.
	round   [][]int      // the cycles of the round under way
	flat    []int        // their bits, in order
	inRound map[int]bool // the bits of the round under way
	cand    []int        // the last completed round's bits, in order
	candCyc [][]int      // its cycles
	reps    int          // completed rounds in a row equal to cand

	// Locked.
	active    bool
	units     [][]int
	unitOf    []int // by bit: its unit, -1 for none
	posOf     []int // by bit: its place in its unit
	fps       []uint64
	slot      int
	gen       uint64 // locks so far: part of every fingerprint
	performed int    // units performed since the lock
	dissolved int
}

// New returns the schedule of a rank that locks once the same bits have
// been performed in the same order repeats rounds in a row (0: never).
func New(repeats int) *Schedule {
	return &Schedule{repeats: repeats, need: repeats, inRound: make(map[int]bool)}
}

// Active reports whether the schedule is locked.
func (s *Schedule) Active() bool { return s.active }

// Dissolved counts the schedule's dissolutions.
func (s *Schedule) Dissolved() int { return s.dissolved }

// Need is how many rounds in a row the schedule now waits for before it
// locks.
func (s *Schedule) Need() int { return s.need }

// Reset forgets what the learning saw: a cycle that negotiated, stopped,
// invalidated entries or ran with a joined rank breaks the pattern.
func (s *Schedule) Reset() {
	s.clearRound()
	s.cand, s.candCyc, s.reps = s.cand[:0], nil, 0
}

func (s *Schedule) clearRound() {
	s.round, s.flat = nil, s.flat[:0]
	clear(s.inRound)
}

// Observe records the cache bits a cached cycle performed, in the order
// the ranks performed them (cycles that performed nothing are not shown),
// as one unit. It reports whether the schedule locked: the loop's next
// cycle then goes by the schedule. Every rank must show it the same
// cycles.
func (s *Schedule) Observe(bits []int) bool { return s.ObserveUnits(bits, nil) }

// ObserveUnits is Observe for a cycle whose bits split into units where
// starts says (the indices in bits where a unit begins after the first:
// where the requests of one call end and another's begin, so that a unit
// is one bucket of a training step). The split is this rank's: a rank
// whose split differs names other units in its headers, and the schedule
// dissolves.
func (s *Schedule) ObserveUnits(bits []int, starts []int) bool {
	if s.repeats <= 0 || s.active || len(bits) == 0 {
		return s.active
	}
	for _, b := range bits {
		if s.inRound[b] {
			// The round under way ended before this cycle without
			// repeating the candidate: it is the new candidate.
			s.cand = append(s.cand[:0], s.flat...)
			s.candCyc, s.reps = s.round, 1
			s.clearRound()
			break
		}
	}
	from := 0
	for _, at := range starts {
		if at > from && at < len(bits) {
			s.round = append(s.round, slices.Clone(bits[from:at]))
			from = at
		}
	}
	s.round = append(s.round, slices.Clone(bits[from:]))
	s.flat = append(s.flat, bits...)
	for _, b := range bits {
		s.inRound[b] = true
	}
	if len(s.cand) > 0 && slices.Equal(s.flat, s.cand) {
		s.reps++
		s.candCyc = s.round
		s.clearRound()
		if s.reps >= s.need {
			s.lock()
		}
	}
	return s.active
}

// lock makes the last round's units (its cycles, split where
// ObserveUnits was told) the schedule's.
func (s *Schedule) lock() {
	s.active, s.slot, s.performed = true, 0, 0
	s.gen++
	s.units = s.candCyc
	top := -1
	for _, bits := range s.units {
		for _, b := range bits {
			top = max(top, b)
		}
	}
	s.unitOf = make([]int, top+1)
	s.posOf = make([]int, top+1)
	for i := range s.unitOf {
		s.unitOf[i] = -1
	}
	s.fps = s.fps[:0]
	whole := scheduleHash(s.gen, s.units)
	for u, bits := range s.units {
		for i, b := range bits {
			s.unitOf[b], s.posOf[b] = u, i
		}
		s.fps = append(s.fps, mix(whole^uint64(u)))
	}
	s.Reset()
}

// scheduleHash mixes the lock's generation and every unit's bits, with the
// places where units begin, into one word (splitmix64's finaliser over a
// running sum): each slot's fingerprint comes from it, so that ranks whose
// schedules differ anywhere (one unit split otherwise) name different
// fingerprints at every slot, and a header that fuses several units never
// runs over units that differ.
func scheduleHash(gen uint64, units [][]int) uint64 {
	h := mix(gen ^ 0x9e3779b97f4a7c15)
	h = mix(h ^ uint64(len(units))<<32)
	for _, bits := range units {
		h = mix(h ^ 0x5bd1e995) // a unit begins
		for _, b := range bits {
			h = mix(h ^ uint64(b+1))
		}
	}
	return h
}

func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Units returns the locked schedule's units (cache bits in the order they
// are performed); nil while learning. The slices must not be changed.
func (s *Schedule) Units() [][]int {
	if !s.active {
		return nil
	}
	return s.units
}

// Slot returns the index of the unit to perform next.
func (s *Schedule) Slot() int { return s.slot }

// Scheduled reports whether a request at cache bit belongs to a unit of
// the locked schedule (one that does not ends it).
func (s *Schedule) Scheduled(bit int) bool {
	return bit >= 0 && bit < len(s.unitOf) && s.unitOf[bit] >= 0
}

// Pos returns the place of bit within its unit (bit must be Scheduled).
func (s *Schedule) Pos(bit int) int { return s.posOf[bit] }

// Header returns this rank's header for the current slot, to be combined
// with every rank's by a bitwise AND (in place). ready is, for a Ready
// vote, how many units from the current one on are ready here (at least
// one; more than MaxFused, or than the units left in the round, count as
// those), and run how many of those lie in one run of memory here, to be
// reduced in one call (0 to ready; see RunOf).
func (s *Schedule) Header(v Vote, ready, run int, dst []uint64) []uint64 {
	dst = dst[:0]
	for range HeaderWords {
		dst = append(dst, ^uint64(0))
	}
	switch v {
	case Ready:
		fp := s.fps[s.slot]
		dst[0], dst[1], dst[2] = fp, ^fp, allReady|stay
		k := max(1, min(ready, MaxFused, len(s.units)-s.slot))
		thermometer(dst[3:runStart], k)
		thermometer(dst[runStart:], max(0, min(run, k)))
	case Wait:
		dst[2] = noneReady | stay
	case Leave:
		dst[2] = noneReady
	}
	return dst
}

// thermometer writes k as its lowest k bits set, over dst's words.
func thermometer(dst []uint64, k int) {
	for i := range dst {
		switch n := k - 64*i; {
		case n <= 0:
			dst[i] = 0
		case n < 64:
			dst[i] = 1<<n - 1
		default:
			dst[i] = ^uint64(0)
		}
	}
}

// count reads a thermometer code (the AND of several: the least of them).
func count(w []uint64) int {
	n := 0
	for _, x := range w {
		n += bits.OnesCount64(x)
	}
	return n
}

// RunOf returns, from the AND of every rank's header that Resolve found to
// Perform, how many units from the current one on lie in one run of
// memory on every rank: when it is at least the units performed, the loop
// reduces them all in one call where they lie.
func RunOf(w []uint64) int { return count(w[runStart:HeaderWords]) }

// Resolve returns what the AND of every rank's header means, and, to
// Perform, how many units from the current one on: the fewest that any
// rank had ready. It depends only on the words, so every rank resolves
// alike.
func Resolve(w []uint64) (Outcome, int) {
	switch {
	case w[2]&stay == 0:
		return Dissolve, 0
	case w[2]&noneReady != 0:
		return Retry, 0
	case w[0] != ^w[1]:
		// The ready ranks named different units.
		return Dissolve, 0
	case w[2]&allReady != 0:
		return Perform, count(w[3:runStart])
	}
	return Retry, 0
}

// Advance moves n units on, after they were performed.
func (s *Schedule) Advance(n int) {
	s.performed += n
	s.slot += n
	if s.slot >= len(s.units) {
		s.slot = 0
	}
}

// ReadyRun returns how many units from the current one on have every bit
// pending, as pending says, up to MaxFused and the end of the round.
func (s *Schedule) ReadyRun(pending func(bit int) bool) int {
	k := 0
	for u := s.slot; u < len(s.units) && k < MaxFused; u++ {
		for _, b := range s.units[u] {
			if !pending(b) {
				return k
			}
		}
		k++
	}
	return k
}

// UnitOf returns the unit of bit (bit must be Scheduled).
func (s *Schedule) UnitOf(bit int) int { return s.unitOf[bit] }

// Dissolve leaves the schedule: the loop negotiates again and learns from
// scratch. A schedule that dissolved before two whole rounds were
// performed doubles the rounds the next lock waits for (up to 64), so that
// a pattern that only looked static does not lock and dissolve over and
// over; one that lasted resets it.
func (s *Schedule) Dissolve() {
	if !s.active {
		return
	}
	s.dissolved++
	if s.performed < 2*len(s.units) {
		s.need = min(s.need*2, maxNeed)
	} else {
		s.need = s.repeats
	}
	s.active, s.units, s.unitOf, s.posOf = false, nil, nil, nil
	s.Reset()
}

// Timing is how long a rank waits in the situations that make it join a
// header without being ready.
type Timing struct {
	// Heartbeat: a rank with nothing ready joins a header this long
	// after its last one, so that a ready rank is never alone in one for
	// longer.
	Heartbeat time.Duration
	// Patience: a ready rank whose headers have come back not performed
	// for this long votes to leave (a peer that never gets ready: the
	// negotiation's stall inspector then reports it).
	Patience time.Duration
	// Stuck: a rank on which a caller waits while the current unit is
	// incomplete votes to leave after this long (the caller may wait on
	// a later unit, whose tensors would otherwise never be reduced).
	Stuck time.Duration
}

// Local is what one rank knows at one of its loop's cycles.
type Local struct {
	// Deviant: a queued request is outside the schedule (or its cache
	// entry changed), or this rank must stop.
	Deviant bool
	// Ready: every tensor of the current unit is queued.
	Ready bool
	// ReadyFor: how long the rank has been ready without the unit being
	// performed (0 when not ready).
	ReadyFor time.Duration
	// StuckFor: how long a caller has waited while the current unit is
	// incomplete (0 when no caller waits, or the unit is ready).
	StuckFor time.Duration
	// SinceHeader: how long since the rank's last header.
	SinceHeader time.Duration
}

// Choose returns whether this rank joins a header now and with which vote.
func Choose(l Local, t Timing) (Vote, bool) {
	switch {
	case l.Deviant:
		return Leave, true
	case l.Ready && l.ReadyFor > t.Patience:
		return Leave, true
	case l.Ready:
		return Ready, true
	case l.StuckFor > t.Stuck:
		return Leave, true
	case l.SinceHeader >= t.Heartbeat:
		return Wait, true
	}
	return Wait, false
}
