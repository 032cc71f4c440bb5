package liveness

import (
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/secret"
)

// star starts n members over loopback with the given timeout and returns
// them with a channel per rank that receives what OnFrozen reports.
func star(t *testing.T, n int, timeout time.Duration) ([]*Star, []chan Frozen) {
	t.Helper()
	key := []byte("a key of the job, 32 bytes long!")
	ln, addrs, err := Listen()
	if err != nil {
		t.Fatal(err)
	}
	stars := make([]*Star, n)
	got := make([]chan Frozen, n)
	for r := range n {
		got[r] = make(chan Frozen, 1)
		cfg := Config{Rank: r, Size: n, Host: fmt.Sprintf("host%d", r), RootHost: "host0", Key: key, Timeout: timeout,
			Interval: timeout / 10, OnFrozen: func(f Frozen) { got[r] <- f }, Logf: t.Logf}
		var l net.Listener
		if r == 0 {
			l = ln
		}
		s, err := Start(cfg, l, addrs)
		if err != nil {
			t.Fatal(err)
		}
		stars[r] = s
		t.Cleanup(func() { s.Close() })
	}
	// Every member connected: rank 0 tracks them all.
	deadline := time.Now().Add(10 * time.Second)
	for {
		stars[0].mu.Lock()
		k := len(stars[0].conns)
		stars[0].mu.Unlock()
		if k == n-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d members reached rank 0", k, n-1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return stars, got
}

// wait returns what rank r's OnFrozen reported within d, or fails.
func wait(t *testing.T, ch chan Frozen, r int, d time.Duration) Frozen {
	t.Helper()
	select {
	case f := <-ch:
		return f
	case <-time.After(d):
		t.Fatalf("rank %d was not told of a frozen rank within %v", r, d)
		return Frozen{}
	}
}

func TestFrozenMemberNamedOnEveryRank(t *testing.T) {
	const timeout = 600 * time.Millisecond
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			stars, got := star(t, n, timeout)
			frozen := n - 1
			start := time.Now()
			stars[frozen].paused.Store(true)
			for r := range n {
				if r == frozen {
					continue
				}
				f := wait(t, got[r], r, 10*timeout)
				if f.Unreachable {
					t.Errorf("rank %d was told the paused rank's host is unreachable; its kernel still acknowledges", r)
				}
				if f.Rank != frozen || f.Silent < timeout {
					t.Errorf("rank %d was told %+v, want rank %d silent for more than %v", r, f, frozen, timeout)
				}
				if r == 0 && f.Host != fmt.Sprintf("host%d", frozen) {
					t.Errorf("rank 0 names host %q, want host%d", f.Host, frozen)
				}
			}
			// Silence counts from the last beat heard, before the pause: the
			// verdict may come a little less than the timeout after it.
			if d := time.Since(start); d < timeout-2*(timeout/10) {
				t.Errorf("declared frozen %v after the pause, sooner than the %v timeout less one beat", d, timeout)
			}
		})
	}
}

func TestFrozenRankZero(t *testing.T) {
	const timeout = 600 * time.Millisecond
	stars, got := star(t, 3, timeout)
	stars[0].paused.Store(true)
	for r := 1; r < 3; r++ {
		if f := wait(t, got[r], r, 10*timeout); f.Rank != 0 || f.Host != "host0" {
			t.Errorf("rank %d was told %+v, want rank 0 on host0", r, f)
		}
	}
}

// TestHealthyAndLeavingRanksAreNotFrozen: beats keep coming from healthy
// ranks, and a rank that leaves says so. The timeout is long enough that a
// loaded machine (the race detector, other test binaries on two cores)
// cannot starve the beat goroutines past it.
func TestHealthyAndLeavingRanksAreNotFrozen(t *testing.T) {
	const timeout = time.Second
	stars, got := star(t, 3, timeout)
	time.Sleep(3 * timeout) // healthy: beats keep coming
	stars[2].Close()        // a rank that leaves is not frozen
	time.Sleep(3 * timeout)
	for r := range 2 {
		select {
		case f := <-got[r]:
			t.Errorf("rank %d was told %+v on a healthy job", r, f)
		default:
		}
	}
}

func TestWrongKeyRefused(t *testing.T) {
	stars, _ := star(t, 2, time.Second)
	addr := stars[0].ln.Addr().String()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := secret.Handshake(c, []byte("the wrong key, also 32 bytes...!"), secret.Dialer, 5*time.Second); err == nil {
		t.Fatal("a stranger without the key completed the handshake")
	}
	stars[0].mu.Lock()
	defer stars[0].mu.Unlock()
	if len(stars[0].conns) != 1 {
		t.Errorf("rank 0 holds %d members, want 1", len(stars[0].conns))
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	ok := Config{Rank: 1, Size: 2, Key: []byte("k"), Timeout: time.Second}
	for name, c := range map[string]Config{
		"no timeout": {Rank: 1, Size: 2, Key: []byte("k")},
		"no key":     {Rank: 1, Size: 2, Timeout: time.Second},
		"bad rank":   {Rank: 2, Size: 2, Key: []byte("k"), Timeout: time.Second},
	} {
		if _, err := Start(c, nil, []string{"127.0.0.1:1"}); err == nil {
			t.Errorf("%s: Start accepted %+v", name, c)
		}
	}
	if _, err := Start(ok, nil, nil); err == nil {
		t.Error("Start of rank 1 without an address of rank 0 succeeded")
	}
}

func TestFrozenNoticeRoundTrip(t *testing.T) {
	for _, f := range []Frozen{
		{Rank: 3, Host: "node-7", Silent: 1234 * time.Millisecond},
		{Rank: 2, Host: "node-2", Silent: 31 * time.Second, Unreachable: true},
	} {
		testFrozenRoundTrip(t, f)
	}
}

func testFrozenRoundTrip(t *testing.T, f Frozen) {
	b := appendFrozen(nil, f)
	if b[0] != frozen {
		t.Fatalf("notice starts with %q", b[0])
	}
	got, err := readFrozen(bufioReader(b[1:]), 4)
	if err != nil || got != f {
		t.Fatalf("round trip = %+v, %v; want %+v", got, err, f)
	}
	if _, err := readFrozen(bufioReader(b[1:]), f.Rank); err == nil {
		t.Errorf("a notice naming rank %d of %d was accepted", f.Rank, f.Rank)
	}
}

// TestUnreachable: a rank whose kernel stopped acknowledging our beats as
// long as it stopped beating is cut off; one whose kernel still
// acknowledges them froze; where TCP_INFO cannot tell, it froze.
func TestUnreachable(t *testing.T) {
	iv := time.Second
	for _, tc := range []struct {
		silent, ack time.Duration
		known, want bool
	}{
		{31 * time.Second, 31 * time.Second, true, true},
		{31 * time.Second, 29500 * time.Millisecond, true, true}, // our last beats went out after it fell silent
		{31 * time.Second, 200 * time.Millisecond, true, false},  // the kernel acks: the process is stopped
		{31 * time.Second, 20 * time.Second, true, false},
		{31 * time.Second, 31 * time.Second, false, false},
	} {
		if got := Unreachable(tc.silent, tc.ack, iv, tc.known); got != tc.want {
			t.Errorf("silent %v, last ack %v ago (known %v): %v, want %v", tc.silent, tc.ack, tc.known, got, tc.want)
		}
	}
}

// TestSinceAckOnALiveConnection: on loopback the peer's kernel acknowledges
// at once, whether or not the peer's process reads.
func TestSinceAckOnALiveConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer, err := ln.Accept() // and never read: a stopped process
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c.Write([]byte{beat})
	time.Sleep(300 * time.Millisecond)
	c.Write([]byte{beat})
	time.Sleep(50 * time.Millisecond)
	ack, known := sinceAck(c)
	if runtime.GOOS != "linux" {
		if known {
			t.Errorf("sinceAck known off Linux")
		}
		return
	}
	if !known || ack > 200*time.Millisecond {
		t.Errorf("sinceAck = %v, %v; want a recent acknowledgement", ack, known)
	}
}
