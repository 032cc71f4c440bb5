package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/secret"
)

// slots builds the launcher's plan for hosts given as "h1:2,h2:1".
func slots(t testing.TB, hosts string) []Slot {
	t.Helper()
	var out []Slot
	for _, h := range strings.Split(hosts, ",") {
		var n int
		name, count, _ := strings.Cut(h, ":")
		if _, err := fmt.Sscan(count, &n); err != nil {
			t.Fatal(err)
		}
		for lr := 0; lr < n; lr++ {
			out = append(out, Slot{Host: name, LocalRank: lr})
		}
	}
	return out
}

// place is (host, rank, local rank, cross rank, local size, cross size), as
// Horovod's test_get_host_assignments writes it.
type place struct {
	host                                   string
	rank, local, cross, localSize, crossSz int
}

func TestAssign(t *testing.T) {
	cases := []struct {
		hosts string
		want  []place
	}{
		{"localhost:1", []place{{"localhost", 0, 0, 0, 1, 1}}},
		{"localhost:3", []place{{"localhost", 0, 0, 0, 3, 1}, {"localhost", 1, 1, 0, 3, 1}, {"localhost", 2, 2, 0, 3, 1}}},
		// Horovod's heterogeneous example: worker-0:1,worker-1:2, np 3.
		{"worker-0:1,worker-1:2", []place{
			{"worker-0", 0, 0, 0, 1, 2}, {"worker-1", 1, 0, 1, 2, 2}, {"worker-1", 2, 1, 0, 2, 1}}},
		{"h1:2,h2:2", []place{
			{"h1", 0, 0, 0, 2, 2}, {"h1", 1, 1, 0, 2, 2}, {"h2", 2, 0, 1, 2, 2}, {"h2", 3, 1, 1, 2, 2}}},
		{"a:2,b:1,c:3", []place{
			{"a", 0, 0, 0, 2, 3}, {"a", 1, 1, 0, 2, 2},
			{"b", 2, 0, 1, 1, 3},
			{"c", 3, 0, 2, 3, 3}, {"c", 4, 1, 1, 3, 2}, {"c", 5, 2, 0, 3, 1}}},
	}
	for _, c := range cases {
		t.Run(c.hosts, func(t *testing.T) {
			got, err := Assign(slots(t, c.hosts))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("%d assignments, want %d", len(got), len(c.want))
			}
			for i, w := range c.want {
				g := got[i]
				p := place{slots(t, c.hosts)[i].Host, g.Rank, g.LocalRank, g.CrossRank, g.LocalSize, g.CrossSize}
				if p != w || g.Size != len(c.want) {
					t.Errorf("slot %d: got %+v size %d, want %+v size %d", i, p, g.Size, w, len(c.want))
				}
			}
		})
	}
}

func TestAssignRefuses(t *testing.T) {
	cases := []struct {
		name   string
		expect []Slot
		want   string
	}{
		{"empty", nil, "no slots"},
		{"no host", []Slot{{"", 0}}, "no host name"},
		{"starts at 1", []Slot{{"h", 1}}, "want local rank 0"},
		{"duplicate", []Slot{{"h", 0}, {"h", 0}}, "want local rank 1"},
		{"descending", []Slot{{"h", 0}, {"h", 2}, {"h", 1}}, "want local rank 1"},
		{"split host", []Slot{{"a", 0}, {"b", 0}, {"a", 1}}, "not listed together"},
	}
	for _, c := range cases {
		if _, err := Assign(c.expect); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Assign = %v, want an error with %q", c.name, err, c.want)
		}
	}
}

func TestCheck(t *testing.T) {
	a := Assignment{Rank: 2, Size: 3, LocalRank: 1, LocalSize: 2, CrossRank: 0, CrossSize: 1}
	if err := a.Check(2, 3, 1, 2, 0, 1); err != nil {
		t.Error(err)
	}
	if err := a.Check(-1, -1, -1, -1, -1, -1); err != nil {
		t.Error("unset values checked:", err)
	}
	err := a.Check(1, 3, 1, -1, 0, 2)
	if err == nil || !strings.Contains(err.Error(), "rank 2 (the environment says 1)") ||
		!strings.Contains(err.Error(), "cross size 1 (the environment says 2)") {
		t.Errorf("Check = %v", err)
	}
}

func TestMissingErrorText(t *testing.T) {
	e := &MissingError{Missing: []Slot{{"h2", 1}}, Size: 4, Reason: "timed out"}
	if got, want := e.Error(), "rendezvous timed out: host h2 local rank 1 never arrived"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	var many []Slot
	for i := 0; i < 10; i++ {
		many = append(many, Slot{"h", i})
	}
	e = &MissingError{Missing: many, Size: 12}
	got := e.Error()
	if !strings.Contains(got, "host h local rank 7 and 2 more never arrived (10 of 12 workers)") || strings.Contains(got, "rank 8") {
		t.Errorf("got %q", got)
	}
}

func newSecret(t testing.TB) []byte {
	t.Helper()
	s, err := secret.New()
	if err != nil {
		t.Fatal(err)
	}
	b, err := secret.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// serve starts a server for expect on a loopback port; it is closed at
// the end of the test.
func serve(t *testing.T, secret []byte, expect []Slot, logf ...func(string, ...any)) (*Server, string) {
	t.Helper()
	s, err := NewServer(secret, expect)
	if err != nil {
		t.Fatal(err)
	}
	if len(logf) > 0 {
		s.Logf = logf[0]
	}
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
	return s, l.Addr().String()
}

type result struct {
	a   Assignment
	err error
}

// joinAll joins every slot of expect (in a random order, each from its own
// goroutine) and returns the results by slot index.
func joinAll(ctx context.Context, addr string, secret []byte, expect []Slot) []result {
	out := make([]result, len(expect))
	var wg sync.WaitGroup
	for _, i := range rand.Perm(len(expect)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := Join(ctx, addr, secret, Member{Slot: expect[i], Data: fmt.Sprintf("addr-of-%v", expect[i])})
			out[i] = result{a, err}
		}()
	}
	wg.Wait()
	return out
}

func TestRendezvous(t *testing.T) {
	for _, hosts := range []string{"localhost:1", "localhost:2", "localhost:3", "h1:2,h2:2", "h1:1,h2:2,h3:2", "worker-0:1,worker-1:2"} {
		t.Run(hosts, func(t *testing.T) {
			expect := slots(t, hosts)
			secret := newSecret(t)
			s, addr := serve(t, secret, expect)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			waited := make(chan error, 1)
			go func() { waited <- s.Wait(ctx) }()
			res := joinAll(ctx, addr, secret, expect)
			if err := <-waited; err != nil {
				t.Fatalf("Wait: %v", err)
			}
			plan, _ := Assign(expect)
			for i, r := range res {
				if r.err != nil {
					t.Fatalf("slot %d: Join: %v", i, r.err)
				}
				a := r.a
				a.Members = nil
				if fmt.Sprint(a) != fmt.Sprint(plan[i]) {
					t.Errorf("slot %d: got %+v, want %+v", i, a, plan[i])
				}
				if len(r.a.Members) != len(expect) {
					t.Fatalf("slot %d: %d members", i, len(r.a.Members))
				}
				for j, m := range r.a.Members {
					if m.Slot != expect[j] || m.Data != fmt.Sprintf("addr-of-%v", expect[j]) {
						t.Errorf("slot %d: member %d is %+v", i, j, m)
					}
				}
			}
		})
	}
}

// TestWrongSecretRefused: intruders (a wrong secret, a stranger speaking
// another protocol, one that says nothing) are refused while the real
// members complete.
func TestWrongSecretRefused(t *testing.T) {
	expect := slots(t, "localhost:3")
	key := newSecret(t)
	var mu sync.Mutex
	var refused []string
	s, addr := serve(t, key, expect, func(f string, a ...any) { mu.Lock(); refused = append(refused, fmt.Sprintf(f, a...)); mu.Unlock() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// A worker of another job, holding a real slot of this one.
	_, err := Join(ctx, addr, newSecret(t), Member{Slot: expect[1], Data: "intruder"})
	if !errors.Is(err, secret.ErrRefused) {
		t.Fatalf("Join with a wrong secret = %v, want secret.ErrRefused", err)
	}
	// A stranger that speaks HTTP, and one that says nothing at all.
	c1, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c1.Write([]byte("GET /global/rank_0 HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n"))
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()

	res := joinAll(ctx, addr, key, expect)
	if err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.err != nil {
			t.Fatalf("slot %d: %v", i, r.err)
		}
		if r.a.Members[1].Data == "intruder" {
			t.Error("the intruder's payload reached the members")
		}
	}
	// The HTTP stranger is refused too (the silent one only after
	// HandshakeTimeout).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		got := append([]string(nil), refused...)
		mu.Unlock()
		if len(got) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refusals logged: %q", got)
		}
	}
}

func TestRefusedSlots(t *testing.T) {
	expect := slots(t, "h1:1,h2:1")
	secret := newSecret(t)
	s, addr := serve(t, secret, expect)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := Join(ctx, addr, secret, Member{Slot: Slot{"h3", 0}})
	if err == nil || !strings.Contains(err.Error(), "host h3 local rank 0 is not a slot of this job (expected h1: local rank 0, h2: local rank 0)") {
		t.Errorf("unexpected slot: %v", err)
	}
	_, err = Join(ctx, addr, secret, Member{Slot: Slot{"h1", 1}})
	if err == nil || !strings.Contains(err.Error(), "not a slot") {
		t.Errorf("unexpected local rank: %v", err)
	}
	first := make(chan result, 1)
	go func() {
		a, err := Join(ctx, addr, secret, Member{Slot: expect[0], Data: "first"})
		first <- result{a, err}
	}()
	waitJoined(t, s, 1)
	_, err = Join(ctx, addr, secret, Member{Slot: expect[0], Data: "second"})
	if err == nil || !strings.Contains(err.Error(), "host h1 local rank 0 has already joined") {
		t.Errorf("duplicate slot: %v", err)
	}
	if _, err := Join(ctx, addr, secret, Member{Slot: expect[1], Data: "x"}); err != nil {
		t.Fatal(err)
	}
	r := <-first
	if r.err != nil || r.a.Members[0].Data != "first" {
		t.Errorf("first: %+v %v", r.a, r.err)
	}
	_, err = Join(ctx, addr, secret, Member{Slot: expect[1]})
	if err == nil || !strings.Contains(err.Error(), "after the rendezvous has completed") {
		t.Errorf("late join: %v", err)
	}
}

// waitJoined waits until n slots have joined s.
func waitJoined(t *testing.T, s *Server, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		got := s.njoined
		s.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d slots joined, want %d", got, n)
		}
	}
}

// TestNeverArrives: a slot that never joins makes Wait, and every waiting
// worker's Join, fail naming it.
func TestNeverArrives(t *testing.T) {
	expect := slots(t, "h1:2,h2:2")
	secret := newSecret(t)
	s, addr := serve(t, secret, expect)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := make(chan error, 3)
	for _, i := range []int{0, 1, 2} {
		go func() {
			_, err := Join(ctx, addr, secret, Member{Slot: expect[i]})
			res <- err
		}()
	}
	waitJoined(t, s, 3)
	wctx, wcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer wcancel()
	err := s.Wait(wctx)
	var me *MissingError
	if !errors.As(err, &me) || !errors.Is(err, context.DeadlineExceeded) ||
		err.Error() != "rendezvous timed out: host h2 local rank 1 never arrived" {
		t.Fatalf("Wait = %v", err)
	}
	for range 3 {
		err := <-res
		if !errors.As(err, &me) || err.Error() != "rendezvous timed out: host h2 local rank 1 never arrived" {
			t.Errorf("Join = %v", err)
		}
	}
	// Once over, it stays over: a late worker learns why.
	_, err = Join(ctx, addr, secret, Member{Slot: expect[3]})
	if !errors.As(err, &me) {
		t.Errorf("late Join = %v", err)
	}
	if err := s.Wait(context.Background()); !errors.As(err, &me) {
		t.Errorf("second Wait = %v", err)
	}
}

// TestJoinTimeoutNamesMissing: a worker whose own deadline passes first
// asks the server which slots are missing.
func TestJoinTimeoutNamesMissing(t *testing.T) {
	expect := slots(t, "h1:1,h2:1,h3:1")
	secret := newSecret(t)
	s, addr := serve(t, secret, expect)
	bg, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go Join(bg, addr, secret, Member{Slot: expect[0]})
	waitJoined(t, s, 1)
	ctx, c2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer c2()
	_, err := Join(ctx, addr, secret, Member{Slot: expect[2]})
	want := "rendezvous timed out: host h2 local rank 0 never arrived"
	if err == nil || err.Error() != want || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Join = %v, want %q", err, want)
	}
	// That worker gave its slot back.
	waitJoined(t, s, 1)
}

// TestRejoin: a worker that goes away before the assignment gives its slot
// back; a new worker takes it and the rendezvous completes.
func TestRejoin(t *testing.T) {
	expect := slots(t, "localhost:2")
	secret := newSecret(t)
	s, addr := serve(t, secret, expect)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c1, cancel1 := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() { _, err := Join(c1, addr, secret, Member{Slot: expect[1], Data: "old"}); gone <- err }()
	waitJoined(t, s, 1)
	cancel1()
	if err := <-gone; err == nil {
		t.Fatal("cancelled Join succeeded")
	}
	waitJoined(t, s, 0)
	res := joinAll(ctx, addr, secret, expect)
	for i, r := range res {
		if r.err != nil {
			t.Fatalf("slot %d: %v", i, r.err)
		}
		if r.a.Members[1].Data == "old" {
			t.Error("the departed worker's payload was kept")
		}
	}
}

// TestCloseMidWait: closing the server ends Wait and every waiting Join.
func TestCloseMidWait(t *testing.T) {
	expect := slots(t, "localhost:3")
	secret := newSecret(t)
	s, addr := serve(t, secret, expect)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	joined := make(chan error, 2)
	for _, i := range []int{0, 2} {
		go func() { _, err := Join(ctx, addr, secret, Member{Slot: expect[i]}); joined <- err }()
	}
	waitJoined(t, s, 2)
	waited := make(chan error, 1)
	go func() { waited <- s.Wait(ctx) }()
	s.Close()
	err := <-waited
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "host localhost local rank 1 never arrived") {
		t.Errorf("Wait = %v", err)
	}
	for range 2 {
		if err := <-joined; err == nil || !strings.Contains(err.Error(), "server was closed") {
			t.Errorf("Join = %v", err)
		}
	}
}

// TestJoinRetries: a worker started before the server keeps trying.
func TestJoinRetries(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip(err)
	}
	addr := l.Addr().String()
	l.Close()
	secret := newSecret(t)
	expect := slots(t, "localhost:1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := make(chan result, 1)
	go func() {
		a, err := Join(ctx, addr, secret, Member{Slot: expect[0], Data: "d"})
		res <- result{a, err}
	}()
	time.Sleep(100 * time.Millisecond)
	s, err := NewServer(secret, expect)
	if err != nil {
		t.Fatal(err)
	}
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skip("the port was taken meanwhile:", err)
	}
	go s.Serve(l)
	defer s.Close()
	r := <-res
	if r.err != nil || r.a.Size != 1 || r.a.Members[0].Data != "d" {
		t.Fatalf("Join = %+v, %v", r.a, r.err)
	}
	// Nobody there at all: the error says so when ctx ends.
	short, c2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer c2()
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l2.Addr().String()
	l2.Close()
	if _, err := Join(short, dead, secret, Member{Slot: expect[0]}); err == nil || !strings.Contains(err.Error(), "cannot reach the server") {
		t.Errorf("Join of nobody = %v", err)
	}
}

func TestNewServerRefuses(t *testing.T) {
	if _, err := NewServer(nil, slots(t, "h:1")); err == nil {
		t.Error("no secret accepted")
	}
	if _, err := NewServer([]byte("0123456789abcdef"), []Slot{{"h", 1}}); err == nil {
		t.Error("bad plan accepted")
	}
}

func TestListenHost(t *testing.T) {
	if h, err := ListenHost("10.9.8.7", "nonesuch0", "x:1"); err != nil || h != "10.9.8.7" {
		t.Errorf("explicit: %q, %v", h, err)
	}
	if h, err := ListenHost("", "", "127.0.0.1:29500"); err != nil || h != "127.0.0.1" {
		t.Errorf("route to loopback: %q, %v", h, err)
	}
	if _, err := ListenHost("", "nonesuch0", ""); err == nil || !strings.Contains(err.Error(), "HOROVOD_GLOO_IFACE=nonesuch0") {
		t.Errorf("unknown interface: %v", err)
	}
	if lo, err := net.InterfaceByName("lo"); err == nil && lo != nil {
		if h, err := ListenHost("", "lo", ""); err != nil || h != "127.0.0.1" {
			t.Errorf("lo: %q, %v", h, err)
		}
	}
}
