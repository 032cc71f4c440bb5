package schedule

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// step is one training step's cached cycles: the bits each performed.
var step = [][]int{{0, 1}, {2}, {3, 4, 5}}

func observeSteps(s *Schedule, n int, cycles [][]int) (lockedAt int) {
	lockedAt = -1
	for i := range n {
		for _, c := range cycles {
			if s.Observe(c) && lockedAt < 0 {
				lockedAt = i
			}
		}
	}
	return lockedAt
}

func TestLocksAfterRepeatedRounds(t *testing.T) {
	for _, repeats := range []int{1, 2, 3, 5} {
		s := New(repeats)
		// The first round becomes the candidate when its first bit
		// comes back (at the start of step 1, counting from 0); each
		// later step that repeats it counts one more.
		at := observeSteps(s, 10, step)
		want := max(repeats, 2) - 1
		if at != want {
			t.Errorf("repeats %d: locked during step %d, want %d", repeats, at, want)
		}
		if !s.Active() || !slices.EqualFunc(s.Units(), step, slices.Equal) {
			t.Errorf("repeats %d: units %v, want %v", repeats, s.Units(), step)
		}
	}
}

func TestNeverLocksWhenOff(t *testing.T) {
	s := New(0)
	if observeSteps(s, 20, step) >= 0 || s.Active() {
		t.Fatal("a schedule with Repeats 0 locked")
	}
	var zero Schedule
	if zero.Observe([]int{1}) {
		t.Fatal("the zero schedule locked")
	}
}

// A step whose order changes from one round to the next never locks; one
// whose grouping into cycles changes locks on its order, with the last
// round's grouping.
func TestLearningNeedsTheSameOrder(t *testing.T) {
	s := New(3)
	for i := range 12 {
		if i%2 == 0 {
			s.Observe([]int{0})
			s.Observe([]int{1})
		} else {
			s.Observe([]int{1})
			s.Observe([]int{0})
		}
	}
	if s.Active() {
		t.Fatalf("locked on alternating orders: %v", s.Units())
	}
	s = New(3)
	groupings := [][][]int{{{0, 1}, {2}}, {{0}, {1, 2}}, {{0}, {1}, {2}}, {{0, 1, 2}}}
	for _, g := range groupings {
		for _, c := range g {
			s.Observe(c)
		}
	}
	if !s.Active() {
		t.Fatal("did not lock on a repeated order")
	}
	if want := [][]int{{0}, {1}, {2}}; !slices.EqualFunc(s.Units(), want, slices.Equal) {
		t.Fatalf("units %v, want the last complete round's %v", s.Units(), want)
	}
}

func TestResetForgets(t *testing.T) {
	s := New(3)
	observeSteps(s, 2, step)
	s.Reset()
	if at := observeSteps(s, 2, step); at >= 0 {
		t.Fatal("locked with fewer rounds in a row than Repeats after a Reset")
	}
	if observeSteps(s, 2, step) < 0 {
		t.Fatal("did not lock once enough rounds followed the Reset")
	}
}

// ranks scripts n ranks' schedules, locked on the same steps.
func ranks(t *testing.T, n int) []*Schedule {
	t.Helper()
	ss := make([]*Schedule, n)
	for i := range ss {
		ss[i] = New(2)
		observeSteps(ss[i], 3, step)
		if !ss[i].Active() {
			t.Fatal("not locked")
		}
	}
	return ss
}

// header combines the ranks' votes as the loop's AND allreduce does, each
// ready rank with one unit ready, and returns the outcome every rank
// resolves.
func header(t *testing.T, ss []*Schedule, votes []Vote) Outcome {
	t.Helper()
	o, _ := headerReady(t, ss, votes, nil)
	return o
}

// headerReady is header with each ready rank's count of ready units (nil:
// one each), and returns the units to perform too.
func headerReady(t *testing.T, ss []*Schedule, votes []Vote, ready []int) (Outcome, int) {
	t.Helper()
	w := make([]uint64, HeaderWords)
	for i := range w {
		w[i] = ^uint64(0)
	}
	for i, s := range ss {
		k := 1
		if ready != nil {
			k = ready[i]
		}
		h := s.Header(votes[i], k, 0, nil)
		if len(h) != HeaderWords {
			t.Fatalf("header of %d words", len(h))
		}
		for k := range w {
			w[k] &= h[k]
		}
	}
	return Resolve(w)
}

func TestHeaderOutcomes(t *testing.T) {
	R, W, L := Ready, Wait, Leave
	cases := []struct {
		votes []Vote
		want  Outcome
	}{
		{[]Vote{R, R, R}, Perform},
		{[]Vote{R, W, R}, Retry},
		{[]Vote{W, W, W}, Retry},
		{[]Vote{R, R, L}, Dissolve},
		{[]Vote{W, L, W}, Dissolve},
		{[]Vote{L, L, L}, Dissolve},
		{[]Vote{R}, Perform},
	}
	for _, c := range cases {
		ss := ranks(t, len(c.votes))
		if got := header(t, ss, c.votes); got != c.want {
			t.Errorf("votes %v: %v, want %v", c.votes, got, c.want)
		}
	}
}

// A rank that has gone on to another unit (or locked another schedule)
// names another fingerprint: the ready ranks disagree, and every rank
// dissolves, whether or not all are ready.
func TestDivergentFingerprintsDissolve(t *testing.T) {
	ss := ranks(t, 3)
	ss[2].Advance(1)
	if got := header(t, ss, []Vote{Ready, Ready, Ready}); got != Dissolve {
		t.Fatalf("ranks at different units: %v, want dissolve", got)
	}
	if got := header(t, ss, []Vote{Ready, Wait, Ready}); got != Dissolve {
		t.Fatalf("ready ranks at different units with one waiting: %v, want dissolve", got)
	}
	// Another lock's schedule with the same units has another generation.
	other := ranks(t, 1)[0]
	other.Dissolve()
	observeSteps(other, 10, step)
	if got := header(t, []*Schedule{ss[0], other}, []Vote{Ready, Ready}); got != Dissolve {
		t.Fatalf("ranks of different locks: %v, want dissolve", got)
	}
}

// A whole scripted run: three ranks queue each step's tensors at their own
// pace; each joins a header when its unit is ready or its heartbeat is due;
// every unit is performed once, in order, on every rank; then one rank
// queues a name outside the schedule and every rank dissolves together.
func TestScriptedRun(t *testing.T) {
	const n = 3
	ss := ranks(t, n)
	// queued[r] holds the bits rank r has queued and not performed.
	queued := make([]map[int]bool, n)
	for r := range queued {
		queued[r] = map[int]bool{}
	}
	var performed []int
	lag := []int{0, 2, 5} // each rank queues step bits this many ticks late
	bits := []int{0, 1, 2, 3, 4, 5}
	sinceHeader := make([]int, n)
	tm := Timing{Heartbeat: 3, Patience: 1000, Stuck: 1000}
	for tick := 0; tick < 200 && len(performed) < 2*len(bits); tick++ {
		for r := range n {
			k := tick - lag[r]
			if k >= 0 && k < 2*len(bits) && k%len(bits) < len(bits) {
				b := bits[k%len(bits)]
				// The second step's bits are queued only once
				// the first's are done (as an optimizer waits).
				if k < len(bits) || len(performed) >= len(bits) {
					queued[r][b] = true
				} else {
					lag[r]++
				}
			}
		}
		votes := make([]Vote, n)
		joins := 0
		for r, s := range ss {
			ready := true
			for _, b := range s.Units()[s.Slot()] {
				ready = ready && queued[r][b]
			}
			v, join := Choose(Local{Ready: ready, SinceHeader: time.Duration(sinceHeader[r])}, tm)
			votes[r] = v
			if join {
				joins++
			}
		}
		if joins == 0 {
			for r := range sinceHeader {
				sinceHeader[r]++
			}
			continue
		}
		// A header completes only once every rank has joined; in the
		// loop a rank that joined blocks until then. Scripted: the
		// header happens when all join, else the joined ranks' time
		// passes.
		if joins < n {
			for r := range sinceHeader {
				sinceHeader[r]++
			}
			continue
		}
		for r := range sinceHeader {
			sinceHeader[r] = 0
		}
		switch header(t, ss, votes) {
		case Perform:
			unit := ss[0].Units()[ss[0].Slot()]
			performed = append(performed, unit...)
			for r, s := range ss {
				for _, b := range s.Units()[s.Slot()] {
					delete(queued[r], b)
				}
				s.Advance(1)
			}
		case Dissolve:
			t.Fatalf("tick %d: dissolved with votes %v", tick, votes)
		}
	}
	if want := append(slices.Clone(bits), bits...); !slices.Equal(performed, want) {
		t.Fatalf("performed %v, want %v", performed, want)
	}
	// Rank 1 queues a tensor the schedule does not know: it votes to
	// leave, and every rank dissolves.
	if ss[1].Scheduled(99) || ss[1].UnitOf(ss[1].Units()[ss[1].Slot()][0]) != ss[1].Slot() || ss[1].UnitOf(5) == ss[1].Slot() {
		t.Fatal("Scheduled, UnitOf")
	}
	if ss[1].Pos(0) != 0 || ss[1].Pos(1) != 1 || ss[1].Pos(5) != 2 {
		t.Fatal("Pos")
	}
	votes := []Vote{Ready, Leave, Wait}
	if v, _ := Choose(Local{Deviant: true, Ready: true}, tm); v != Leave {
		t.Fatalf("a deviant rank votes %v", v)
	}
	if got := header(t, ss, votes); got != Dissolve {
		t.Fatalf("%v", got)
	}
	for _, s := range ss {
		s.Dissolve()
		if s.Active() || s.Dissolved() != 1 {
			t.Fatal("still active after Dissolve")
		}
	}
}

func TestChoose(t *testing.T) {
	tm := Timing{Heartbeat: 100 * time.Millisecond, Patience: time.Second, Stuck: 20 * time.Millisecond}
	cases := []struct {
		l    Local
		v    Vote
		join bool
	}{
		{Local{}, Wait, false},
		{Local{SinceHeader: 100 * time.Millisecond}, Wait, true},
		{Local{Ready: true}, Ready, true},
		{Local{Ready: true, ReadyFor: 2 * time.Second}, Leave, true},
		{Local{StuckFor: 10 * time.Millisecond}, Wait, false},
		{Local{StuckFor: 30 * time.Millisecond}, Leave, true},
		{Local{Deviant: true}, Leave, true},
	}
	for _, c := range cases {
		v, join := Choose(c.l, tm)
		if v != c.v || join != c.join {
			t.Errorf("%+v: %v %v, want %v %v", c.l, v, join, c.v, c.join)
		}
	}
}

// A schedule that dissolves before two rounds were performed waits for
// twice as many rounds before it locks again (up to 64); one that lasted
// goes back to Repeats.
func TestDissolveBacksOff(t *testing.T) {
	s := New(2)
	for _, want := range []int{4, 8, 16, 32, 64, 64} {
		observeSteps(s, 100, step)
		if !s.Active() {
			t.Fatal("did not lock")
		}
		s.Advance(1)
		s.Dissolve()
		if s.Need() != want {
			t.Fatalf("need %d, want %d", s.Need(), want)
		}
	}
	observeSteps(s, 100, step)
	s.Advance(len(step))
	s.Advance(len(step))
	s.Dissolve()
	if s.Need() != 2 {
		t.Fatalf("need %d after a lasting schedule, want 2", s.Need())
	}
}

func TestStrings(t *testing.T) {
	got := fmt.Sprint(Ready, Wait, Leave, Vote(9), Perform, Retry, Dissolve, Outcome(9))
	if got != "ready wait leave vote? perform retry dissolve outcome?" {
		t.Fatal(got)
	}
}

// A cycle split into units where the calls' requests begin locks with
// those units; ranks fuse as many ready units in one header as the least
// ready of them has, never past the end of the round.
func TestUnitsAndFusing(t *testing.T) {
	ss := make([]*Schedule, 3)
	for i := range ss {
		ss[i] = New(2)
		for range 3 {
			ss[i].ObserveUnits([]int{0, 1, 2, 3, 4}, []int{2, 3})
			ss[i].ObserveUnits([]int{5}, nil)
		}
		if want := [][]int{{0, 1}, {2}, {3, 4}, {5}}; !slices.EqualFunc(ss[i].Units(), want, slices.Equal) {
			t.Fatalf("units %v, want %v", ss[i].Units(), want)
		}
	}
	R := []Vote{Ready, Ready, Ready}
	if o, n := headerReady(t, ss, R, []int{3, 2, 4}); o != Perform || n != 2 {
		t.Fatalf("%v %d, want perform 2 (the least ready)", o, n)
	}
	for _, s := range ss {
		s.Advance(2)
	}
	if o, n := headerReady(t, ss, R, []int{9, 9, 9}); o != Perform || n != 2 {
		t.Fatalf("%v %d, want perform 2 (the rest of the round)", o, n)
	}
	if o, n := headerReady(t, ss, R, []int{MaxFused + 5, MaxFused + 5, MaxFused + 5}); o != Perform || n != 2 {
		t.Fatalf("%v %d", o, n)
	}
	for _, s := range ss {
		s.Advance(2) // the round's end: back to the first unit
	}
	if ss[0].Slot() != 0 {
		t.Fatalf("slot %d after the round, want 0", ss[0].Slot())
	}
	pending := map[int]bool{2: true, 3: true, 4: true, 0: true}
	if k := ss[0].ReadyRun(func(b int) bool { return pending[b] }); k != 0 {
		t.Fatalf("ReadyRun %d with bit 1 missing, want 0", k)
	}
	pending[1] = true
	if k := ss[0].ReadyRun(func(b int) bool { return pending[b] }); k != 3 {
		t.Fatalf("ReadyRun %d, want 3 (bit 5 missing)", k)
	}
	if ss[0].UnitOf(4) != 2 || ss[0].Pos(4) != 1 {
		t.Fatal("UnitOf, Pos")
	}
	// A rank that split the same bits otherwise names other
	// fingerprints, at every slot.
	other := New(2)
	for range 3 {
		other.ObserveUnits([]int{0, 1, 2, 3, 4}, []int{2})
		other.ObserveUnits([]int{5}, nil)
	}
	if got := header(t, []*Schedule{ss[0], other}, []Vote{Ready, Ready}); got != Dissolve {
		t.Fatalf("ranks with different units: %v, want dissolve", got)
	}
}

// Thermometer codes of every count up to MaxFused resolve to that count.
func TestReadyCounts(t *testing.T) {
	s := New(1)
	big := make([]int, MaxFused+10)
	for i := range big {
		big[i] = i
	}
	starts := make([]int, len(big))
	for i := range starts {
		starts[i] = i
	}
	for range 3 {
		s.ObserveUnits(big, starts[1:])
	}
	if !s.Active() || len(s.Units()) != len(big) {
		t.Fatalf("locked %v with %d units", s.Active(), len(s.Units()))
	}
	for _, k := range []int{1, 2, 63, 64, 65, 127, 128, 129, 500, MaxFused - 1, MaxFused} {
		h := s.Header(Ready, k, k, nil)
		o, n := Resolve(h)
		if o != Perform || n != k || RunOf(h) != k {
			t.Fatalf("ready %d: %v %d, run %d", k, o, n, RunOf(h))
		}
	}
}

// TestHeaderRunCount: the run count of the AND of the ranks' headers is
// the least any rank has in one run of memory, never more than the units
// it has ready; a rank with none in one run takes the whole header to 0.
func TestHeaderRunCount(t *testing.T) {
	cases := []struct {
		ready, run []int
		n, wantRun int
	}{
		{[]int{4, 4, 4}, []int{4, 4, 4}, 4, 4},
		{[]int{4, 4, 4}, []int{3, 1, 2}, 4, 1},
		{[]int{2, 5}, []int{5, 5}, 2, 2},
		{[]int{3, 3}, []int{3, 0}, 3, 0},
		{[]int{200, 130}, []int{150, 129}, 130, 129},
	}
	for _, c := range cases {
		ss := make([]*Schedule, len(c.ready))
		units := make([]int, 300)
		starts := make([]int, len(units)-1)
		for i := range units {
			units[i] = i
		}
		for i := range starts {
			starts[i] = i + 1
		}
		w := make([]uint64, HeaderWords)
		for i := range w {
			w[i] = ^uint64(0)
		}
		for i := range ss {
			s := New(1)
			ss[i] = s
			for range 3 {
				s.ObserveUnits(units, starts)
			}
			if !s.Active() {
				t.Fatal("the schedule did not lock")
			}
			for k, x := range s.Header(Ready, c.ready[i], c.run[i], nil) {
				w[k] &= x
			}
		}
		o, n := Resolve(w)
		if o != Perform || n != c.n || RunOf(w) != c.wantRun {
			t.Errorf("ready %v, run %v: %v %d units, run %d; want perform %d, run %d",
				c.ready, c.run, o, n, RunOf(w), c.n, c.wantRun)
		}
	}
}
