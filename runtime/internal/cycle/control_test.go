package cycle

import (
	"errors"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/cache"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// ranks scripts n ranks' Control and State in one goroutine: the agreement
// is an AND of their vectors, the farewell exchange a copy of their records.
type ranks struct {
	t      *testing.T
	ctls   []Control
	states []*State
}

func newRanks(t *testing.T, n int) *ranks {
	rs := &ranks{t: t, ctls: make([]Control, n)}
	for r := 0; r < n; r++ {
		rs.states = append(rs.states, New(cache.New(0, r), nil))
	}
	return rs
}

// agree runs one cycle's agreement with no requests, each rank asking to
// stop by the stop rule (shutdown lists the ranks where Shutdown was
// called), and returns whether every rank decided to stop.
func (rs *ranks) agree(shutdown ...int) bool {
	rs.t.Helper()
	n := len(rs.ctls)
	words := make([][]uint64, n)
	for r := range n {
		rs.ctls[r].BeginCycle()
		words[r] = rs.states[r].Begin(nil, rs.ctls[r].Stopping(in(r, shutdown)))
		rs.ctls[r].EnterCollective()
	}
	and := append([]uint64(nil), words[0]...)
	for _, w := range words[1:] {
		for i := range w {
			and[i] &= w[i]
		}
	}
	stop := false
	for r := range n {
		copy(words[r], and)
		rs.states[r].Agreed()
		d := rs.states[r].Decide(time.Unix(1, 0))
		if r > 0 && d.Shutdown != stop {
			rs.t.Fatalf("rank %d decided shutdown=%v, rank 0 %v", r, d.Shutdown, stop)
		}
		stop = d.Shutdown
	}
	return stop
}

// farewell exchanges the ranks' records and returns what each reports.
func (rs *ranks) farewell(shutdown ...int) []Outcome {
	var recs [][]byte
	for r := range rs.ctls {
		recs = append(recs, wire.AppendFarewell(nil, rs.ctls[r].Farewell(in(r, shutdown))))
	}
	out := make([]Outcome, len(rs.ctls))
	for r := range rs.ctls {
		out[r] = rs.ctls[r].Resolve(recs, r, nil)
	}
	return out
}

func in(r int, list []int) bool {
	for _, x := range list {
		if x == r {
			return true
		}
	}
	return false
}

// TestFailureBeforeTheAgreementIsToldToEveryRank: rank 1 fails at the start
// of a cycle, before any collective; one more cycle stops every rank, and
// the farewell makes every rank report rank 1's error (rank 1 its own,
// unflattened).
func TestFailureBeforeTheAgreementIsToldToEveryRank(t *testing.T) {
	rs := newRanks(t, 3)
	if rs.agree() {
		t.Fatal("an idle cycle stopped the job")
	}
	boom := errors.New("boom")
	rs.ctls[1].BeginCycle()
	if act := rs.ctls[1].Fail(boom, false); act != TellOthers {
		t.Fatalf("aligned failure: %v, want %v", act, TellOthers)
	}
	if !rs.agree() {
		t.Fatal("the cycle after rank 1's failure did not stop every rank")
	}
	for r, o := range rs.farewell() {
		switch {
		case r == 1 && o.Own != boom:
			t.Errorf("rank 1 reports %+v, want its own error", o)
		case r != 1 && (!o.Found || o.Cause.Rank != 1 || o.Cause.Text != "boom" || o.Own != nil):
			t.Errorf("rank %d reports %+v, want rank 1's failure", r, o)
		}
	}
}

// TestFailureInsideACollectiveAborts: once a rank has entered a collective
// the ranks are out of step: abort, and tell nobody; a peer's failure is
// left alone; only the first failure is told.
func TestFailureInsideACollectiveAborts(t *testing.T) {
	var c Control
	c.BeginCycle()
	c.EnterCollective()
	if act := c.Fail(errors.New("x"), false); act != Abort {
		t.Fatalf("failure in a collective: %v, want %v", act, Abort)
	}
	if c.Stopping(false) {
		t.Fatal("an aborted failure was recorded for the farewell")
	}
	c.BeginCycle()
	if act := c.Fail(errors.New("peer"), true); act != Leave {
		t.Fatalf("a peer's failure: %v, want %v", act, Leave)
	}
	first := errors.New("first")
	if act := c.Fail(first, false); act != TellOthers {
		t.Fatalf("first aligned failure: %v", act)
	}
	if act := c.Fail(errors.New("second"), false); act != Abort {
		t.Fatalf("second failure: %v, want %v", act, Abort)
	}
	if f := c.Farewell(false); f.Kind != wire.FarewellFailed || f.Text != first.Error() {
		t.Fatalf("farewell %+v, want the first failure's", f)
	}
}

// TestLowestFailingRankWins: ranks 2 and 1 fail in the same cycle; every
// rank but rank 1 reports rank 1, the lowest.
func TestLowestFailingRankWins(t *testing.T) {
	rs := newRanks(t, 4)
	for _, r := range []int{2, 1} {
		rs.ctls[r].BeginCycle()
		rs.ctls[r].Fail(errors.New("rank failed"), false)
	}
	if !rs.agree() {
		t.Fatal("no stop")
	}
	for r, o := range rs.farewell() {
		if r == 1 {
			if o.Own == nil {
				t.Errorf("rank 1 does not report its own error: %+v", o)
			}
			continue
		}
		if !o.Found || o.Cause.Rank != 1 {
			t.Errorf("rank %d reports %+v, want rank 1", r, o)
		}
	}
}

// TestStallStopsEveryRank: rank 0's stall inspector stops the job; the
// others report rank 0's stall, rank 0 its own verdict.
func TestStallStopsEveryRank(t *testing.T) {
	rs := newRanks(t, 3)
	verdict := errors.New("stall inspector: x")
	rs.ctls[0].Stall(verdict)
	rs.ctls[0].Stall(errors.New("later"))
	if !rs.agree() {
		t.Fatal("a stall verdict did not stop every rank")
	}
	for r, o := range rs.farewell() {
		switch {
		case r == 0 && o.Own != verdict:
			t.Errorf("rank 0 reports %+v, want its first verdict", o)
		case r != 0 && (!o.Found || o.Cause.Kind != wire.FarewellStall || o.Cause.Rank != 0):
			t.Errorf("rank %d reports %+v, want rank 0's stall", r, o)
		}
	}
}

// TestShutdownByOneRank: rank 2 alone calls Shutdown; every rank stops, the
// others report that rank 2 called it, rank 2 nothing.
func TestShutdownByOneRank(t *testing.T) {
	rs := newRanks(t, 3)
	if !rs.agree(2) {
		t.Fatal("Shutdown on rank 2 did not stop every rank")
	}
	for r, o := range rs.farewell(2) {
		switch {
		case r == 2 && (o.Found || o.Own != nil):
			t.Errorf("rank 2 reports %+v, want nothing", o)
		case r != 2 && (!o.Found || o.Cause.Kind != wire.FarewellShutdown || o.Cause.Rank != 2):
			t.Errorf("rank %d reports %+v, want rank 2's Shutdown", r, o)
		}
	}
}

// TestFarewellExchangeFails: without the records a rank reports what it
// knows: its failure, else its stall verdict, else the exchange's error.
func TestFarewellExchangeFails(t *testing.T) {
	xerr := errors.New("exchange")
	var clean, failed, stalled Control
	failed.BeginCycle()
	fail := errors.New("fail")
	failed.Fail(fail, false)
	verdict := errors.New("stall")
	stalled.Stall(verdict)
	for _, tt := range []struct {
		c    *Control
		want error
	}{{&clean, xerr}, {&failed, fail}, {&stalled, verdict}} {
		if o := tt.c.Resolve(nil, 0, xerr); o.Own != tt.want || o.Found {
			t.Errorf("%+v, want own %v", o, tt.want)
		}
	}
}

// TestTickPolicy: the next cycle is a cycle time after the last agreement,
// or the idle static schedule's wake time; the loop sleeps only while the
// tick is ahead and no caller waits, or the idle schedule sleeps anyway.
func TestTickPolicy(t *testing.T) {
	var c Control
	at := time.Unix(100, 0)
	c.Synced(at)
	if got := c.NextTick(5*time.Millisecond, false, time.Time{}); !got.Equal(at.Add(5 * time.Millisecond)) {
		t.Errorf("next tick %v", got)
	}
	wake := at.Add(time.Second)
	if got := c.NextTick(5*time.Millisecond, true, wake); !got.Equal(wake) {
		t.Errorf("idle schedule's tick %v, want %v", got, wake)
	}
	for _, tt := range []struct {
		wait      time.Duration
		idle, hot bool
		want      bool
	}{
		{time.Millisecond, false, false, true},
		{time.Millisecond, false, true, false},
		{time.Millisecond, true, true, true},
		{0, false, false, false},
		{-time.Millisecond, true, false, false},
	} {
		if got := Sleep(tt.wait, tt.idle, tt.hot); got != tt.want {
			t.Errorf("Sleep(%v, idle %v, hot %v) = %v", tt.wait, tt.idle, tt.hot, got)
		}
	}
}
