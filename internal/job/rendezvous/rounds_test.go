package rendezvous

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// roundServer starts a RoundServer on a loopback port whose OnReady
// reports go to the returned channel; it is closed at the end of the test.
func roundServer(t *testing.T, secret []byte) (*RoundServer, string, chan Slot) {
	t.Helper()
	s, err := NewRoundServer(secret)
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan Slot, 64)
	s.OnReady = func(sl Slot) { ready <- sl }
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip("no loopback TCP:", err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve returned %v after Close", err)
		}
	})
	return s, l.Addr().String(), ready
}

type roundResult struct {
	a   Assignment
	se  *Session
	err error
}

// joinRound joins in the background; the result arrives on the channel.
func joinRound(ctx context.Context, addr string, secret []byte, sl Slot, last int) chan roundResult {
	out := make(chan roundResult, 1)
	go func() {
		a, se, err := JoinRound(ctx, addr, secret, Member{Slot: sl, Data: "data-" + sl.String()}, last)
		out <- roundResult{a, se, err}
	}()
	return out
}

func get(t *testing.T, c chan roundResult) roundResult {
	t.Helper()
	select {
	case r := <-c:
		if r.se != nil {
			t.Cleanup(func() { r.se.Close() })
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("JoinRound did not return")
	}
	return roundResult{}
}

// readyOf collects n OnReady reports.
func readyOf(t *testing.T, ready chan Slot, n int) []Slot {
	t.Helper()
	var out []Slot
	for len(out) < n {
		select {
		case sl := <-ready:
			out = append(out, sl)
		case <-time.After(10 * time.Second):
			t.Fatalf("got %v ready, want %d", out, n)
		}
	}
	slices.SortFunc(out, func(a, b Slot) int { return strings.Compare(a.String(), b.String()) })
	return out
}

func noReady(t *testing.T, ready chan Slot) {
	t.Helper()
	select {
	case sl := <-ready:
		t.Fatalf("unexpected ready report of %v", sl)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestRounds walks a job through a start, a reset that adds a host, and a
// reset that removes one.
func TestRounds(t *testing.T) {
	secret := newSecret(t)
	s, addr, ready := roundServer(t, secret)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a0, a1, b0 := Slot{"a", 0}, Slot{"a", 1}, Slot{"b", 0}

	// Round 1: a's two workers, new.
	if err := s.StartRound(1, []Slot{a0, a1}); err != nil {
		t.Fatal(err)
	}
	r0, r1 := joinRound(ctx, addr, secret, a0, 0), joinRound(ctx, addr, secret, a1, 0)
	g0, g1 := get(t, r0), get(t, r1)
	for i, g := range []roundResult{g0, g1} {
		if g.err != nil {
			t.Fatalf("worker %d: %v", i, g.err)
		}
		if g.a.Round != 1 || g.a.Rank != i || g.a.Size != 2 || g.a.LocalSize != 2 || len(g.a.Members) != 2 {
			t.Fatalf("worker %d: %+v", i, g.a)
		}
		if g.a.Members[1-i].Data != "data-"+[]Slot{a0, a1}[1-i].String() {
			t.Fatalf("worker %d: members %+v", i, g.a.Members)
		}
	}
	noReady(t, ready) // new workers are not reported

	// The coordinator gets host updates, merged.
	if err := s.Notify(a0, HostUpdate{Seq: 1, Added: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Notify(a0, HostUpdate{Seq: 2, Removed: true}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	var u HostUpdate
	for ok := false; !ok; {
		if time.Now().After(deadline) {
			t.Fatal("no host update arrived")
		}
		time.Sleep(5 * time.Millisecond)
		if v, got := g0.se.TakeUpdate(); got {
			u.Seq, u.Added, u.Removed = v.Seq, u.Added || v.Added, u.Removed || v.Removed
			ok = u.Seq == 2
		}
	}
	if !u.Added || !u.Removed {
		t.Fatalf("update %+v, want seq 2 added and removed", u)
	}
	if _, got := g0.se.TakeUpdate(); got {
		t.Fatal("TakeUpdate returned the same update twice")
	}
	if err := s.Notify(b0, HostUpdate{Seq: 3}); err == nil {
		t.Fatal("Notify to a slot that is not a member succeeded")
	}

	// Reset: both leave round 1 and ask for the next; b is added.
	g0.se.Close()
	g1.se.Close()
	r0, r1 = joinRound(ctx, addr, secret, a0, 1), joinRound(ctx, addr, secret, a1, 1)
	if got := readyOf(t, ready, 2); !slices.Equal(got, []Slot{a0, a1}) {
		t.Fatalf("ready %v", got)
	}
	if err := s.StartRound(2, []Slot{a0, a1, b0}); err != nil {
		t.Fatal(err)
	}
	rb := joinRound(ctx, addr, secret, b0, 0)
	g0, g1, gb := get(t, r0), get(t, r1), get(t, rb)
	for i, g := range []roundResult{g0, g1, gb} {
		if g.err != nil || g.a.Round != 2 || g.a.Rank != i || g.a.Size != 3 {
			t.Fatalf("round 2, worker %d: %+v %v", i, g.a, g.err)
		}
	}
	if gb.a.CrossRank != 1 || gb.a.LocalSize != 1 {
		t.Fatalf("b's placement %+v", gb.a)
	}

	// Reset again; the next round has no place for a[1].
	for _, g := range []roundResult{g0, g1, gb} {
		g.se.Close()
	}
	r0, r1, rb = joinRound(ctx, addr, secret, a0, 2), joinRound(ctx, addr, secret, a1, 2), joinRound(ctx, addr, secret, b0, 2)
	readyOf(t, ready, 3)
	if err := s.StartRound(3, []Slot{a0, b0}); err != nil {
		t.Fatal(err)
	}
	if g := get(t, r1); !errors.Is(g.err, ErrRemoved) {
		t.Fatalf("removed worker: %+v %v, want ErrRemoved", g.a, g.err)
	}
	g0, gb = get(t, r0), get(t, rb)
	if g0.err != nil || gb.err != nil || g0.a.Rank != 0 || gb.a.Rank != 1 || g0.a.Size != 2 || g0.a.Round != 3 {
		t.Fatalf("round 3: %+v %v / %+v %v", g0.a, g0.err, gb.a, gb.err)
	}
	if err := s.StartRound(3, []Slot{a0}); err == nil {
		t.Fatal("StartRound accepted a round number that does not grow")
	}
}

// TestRoundBreak: a round whose worker dies before it completes; the
// members that joined, and the one that joins later, are reported ready
// and join the next round.
func TestRoundBreak(t *testing.T) {
	secret := newSecret(t)
	s, addr, ready := roundServer(t, secret)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a0, a1, b0 := Slot{"a", 0}, Slot{"a", 1}, Slot{"b", 0}
	if err := s.StartRound(1, []Slot{a0, a1, b0}); err != nil {
		t.Fatal(err)
	}
	r0 := joinRound(ctx, addr, secret, a0, 0)
	time.Sleep(50 * time.Millisecond) // a[0] has joined; b[0] never will
	s.Break()
	if got := readyOf(t, ready, 1); got[0] != a0 {
		t.Fatalf("ready %v", got)
	}
	r1 := joinRound(ctx, addr, secret, a1, 0)
	if got := readyOf(t, ready, 1); got[0] != a1 {
		t.Fatalf("ready %v", got)
	}
	if err := s.StartRound(2, []Slot{a0, a1}); err != nil {
		t.Fatal(err)
	}
	g0, g1 := get(t, r0), get(t, r1)
	if g0.err != nil || g1.err != nil || g0.a.Round != 2 || g1.a.Rank != 1 || g1.a.Size != 2 {
		t.Fatalf("%+v %v / %+v %v", g0.a, g0.err, g1.a, g1.err)
	}
	s.Break() // a completed round: nothing to do
	noReady(t, ready)
}

// TestRoundRefusals: a fixed job's worker, a duplicate slot, and a
// RoundServer that closes under waiting workers.
func TestRoundRefusals(t *testing.T) {
	secret := newSecret(t)
	s, addr, _ := roundServer(t, secret)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a0 := Slot{"a", 0}
	if _, err := Join(ctx, addr, secret, Member{Slot: a0}); err == nil || !strings.Contains(err.Error(), "elastic") {
		t.Fatalf("fixed worker at an elastic server: %v", err)
	}
	first := joinRound(ctx, addr, secret, a0, 0) // waits: no round yet
	time.Sleep(50 * time.Millisecond)
	if g := get(t, joinRound(ctx, addr, secret, a0, 0)); g.err == nil || !strings.Contains(g.err.Error(), "same HOROVOD_HOSTNAME") {
		t.Fatalf("duplicate: %v", g.err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.Close() }()
	if g := get(t, first); g.err == nil {
		t.Fatal("a waiting worker got no error when the server closed")
	}
	wg.Wait()

	// And the other way round: an elastic worker at a fixed job's server.
	fixed, faddr := serve(t, secret, []Slot{a0})
	_ = fixed
	if g := get(t, joinRound(ctx, faddr, secret, a0, 0)); g.err == nil || !strings.Contains(g.err.Error(), "runs a fixed") {
		t.Fatalf("elastic worker at a fixed server: %v", g.err)
	}
	if _, err := NewRoundServer(nil); err == nil {
		t.Fatal("NewRoundServer accepted no secret")
	}
}

// TestJoinRoundCancelled: a worker waiting for a round that never comes
// stops when its context ends.
func TestJoinRoundCancelled(t *testing.T) {
	secret := newSecret(t)
	_, addr, _ := roundServer(t, secret)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	g := get(t, joinRound(ctx, addr, secret, Slot{"a", 0}, 0))
	if !errors.Is(g.err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", g.err)
	}
}

// TestFrozenReportsOfAFormerMember: after the job re-forms without C (its
// node went silent), C's report that A froze, sent when its link came
// back, stops nobody: C is removed, its session closed. A member's report
// about C, no longer a member, is ignored; about B, passed on.
func TestFrozenReportsOfAFormerMember(t *testing.T) {
	secret := []byte("0123456789abcdef")
	s, addr, _ := roundServer(t, secret)
	var mu sync.Mutex
	var frozen []Slot
	s.OnFrozen = func(sl Slot) { mu.Lock(); frozen = append(frozen, sl); mu.Unlock() }
	a, b, c := Slot{Host: "a", LocalRank: 0}, Slot{Host: "b", LocalRank: 0}, Slot{Host: "c", LocalRank: 0}
	if err := s.StartRound(1, []Slot{a, b, c}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ra, rb, rc := joinRound(ctx, addr, secret, a, 0), joinRound(ctx, addr, secret, b, 0), joinRound(ctx, addr, secret, c, 0)
	sa, _, sc := get(t, ra), get(t, rb), get(t, rc)
	if sa.err != nil || sc.err != nil {
		t.Fatal(sa.err, sc.err)
	}
	if err := s.StartRound(2, []Slot{a, b}); err != nil {
		t.Fatal(err)
	}
	if err := sc.se.ReportFrozen(a); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sc.se.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the former member's session stays open after its stale report")
	}
	if err := sa.se.ReportFrozen(c); err != nil {
		t.Fatal(err)
	}
	if err := sa.se.ReportFrozen(b); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		got := slices.Clone(frozen)
		mu.Unlock()
		if len(got) > 0 || time.Now().After(deadline) {
			if len(got) != 1 || got[0] != b {
				t.Fatalf("OnFrozen was told %v; want only b (a member's report about a member)", got)
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}
