package embedded

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/secret"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/tensor"
)

func leakCheck(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if now := runtime.NumGoroutine(); now > before {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines before, %d after:\n%s", before, now, buf[:runtime.Stack(buf, true)])
		}
	})
}

func localGroup(t *testing.T, n int, o GroupOptions) []*Comm {
	t.Helper()
	cs, err := NewLocalGroup(n, o)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*Comm, n)
	for i, c := range cs {
		out[i] = c.(*Comm)
	}
	t.Cleanup(func() {
		for _, c := range out {
			c.Close()
		}
	})
	return out
}

func wantPeerError(t *testing.T, what string, err error, rank int, cause string) {
	t.Helper()
	var pe *comm.PeerError
	if !errors.As(err, &pe) || !errors.Is(err, comm.ErrClosed) {
		t.Errorf("%s: %v, want a *comm.PeerError matching comm.ErrClosed", what, err)
		return
	}
	if pe.Rank != rank {
		t.Errorf("%s: %v names rank %d, want %d", what, err, pe.Rank, rank)
	}
	if !strings.Contains(pe.Cause, cause) {
		t.Errorf("%s: cause %q, want it to contain %q", what, pe.Cause, cause)
	}
}

// TestWrongSecretRefused: a process without the key is turned away while
// the mesh forms, and the job goes on.
func TestWrongSecretRefused(t *testing.T) {
	leakCheck(t)
	key := []byte("the right secret, 32 bytes long!")
	const n = 2
	lns := make([]*Listeners, n)
	peers := make([]Peer, n)
	dir := shortDir(t)
	for r := range n {
		l, err := Listen("local", "127.0.0.1:0", dir)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		lns[r], peers[r] = l, l.Peer()
	}
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() {
		comms[0], errs[0] = New(context.Background(), Config{Rank: 0, Peers: peers, Secret: key, Listeners: lns[0], ConnectTimeout: 10 * time.Second})
	})
	// Strangers knock on rank 0's doors first, over TCP and the Unix socket.
	for _, addr := range [][2]string{{"tcp", peers[0].TCP}, {"unix", peers[0].Unix}} {
		nc, err := net.Dial(addr[0], addr[1])
		if err != nil {
			t.Fatal(err)
		}
		err = secret.Handshake(nc, []byte("a wrong secret, also 32 bytes..."), secret.Dialer, 5*time.Second)
		nc.Close()
		if !errors.Is(err, secret.ErrRefused) {
			t.Errorf("%s stranger with a wrong secret: %v, want secret.ErrRefused", addr[0], err)
		}
	}
	// One that says nothing at all must not hold up the mesh either.
	silent, err := net.Dial("tcp", peers[0].TCP)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	wg.Go(func() {
		comms[1], errs[1] = New(context.Background(), Config{Rank: 1, Peers: peers, Secret: key, Listeners: lns[1], ConnectTimeout: 10 * time.Second})
	})
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: New: %v", r, err)
		}
	}
	errs = commtest.OnRanks(comms, func(c *Comm) error {
		v := []int32{int32(c.Rank()) + 1}
		if err := c.Allreduce(tensor.FromInt32(v), tensor.Sum); err != nil {
			return err
		}
		if v[0] != 3 {
			t.Errorf("rank %d: allreduce gave %d, want 3", c.Rank(), v[0])
		}
		return c.Close()
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func shortDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "ghv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// crash closes every connection of c's process abruptly, without a
// goodbye, as the kernel does when a process dies.
func crash(c *Comm) {
	c.m.shut.Store(true) // a dead process tells nobody anything
	for _, cn := range c.m.conns {
		if cn != nil && cn.connected() {
			if tc, ok := cn.nc.(*net.TCPConn); ok {
				tc.SetLinger(0) // a reset, as from a killed process
			}
			cn.nc.Close()
		}
	}
}

// TestPeerDiesMidCollective: a rank's connections drop while every rank is
// in a large allreduce; the others' calls, blocked and later, fail with a
// *comm.PeerError naming it, and nothing hangs or leaks.
func TestPeerDiesMidCollective(t *testing.T) {
	for _, unix := range []bool{false, true} {
		name := "tcp"
		if unix {
			name = "unix"
		}
		t.Run(name, func(t *testing.T) {
			leakCheck(t)
			const n, victim = 3, 2
			cs := localGroup(t, n, GroupOptions{Unix: unix})
			started := make(chan struct{}, n)
			errs := commtest.OnRanks(cs, func(c *Comm) error {
				buf := tensor.New(tensor.Float32, 8<<20)
				if c.Rank() == victim {
					go func() {
						<-started
						<-started
						time.Sleep(20 * time.Millisecond)
						crash(c)
					}()
				} else {
					started <- struct{}{}
				}
				// Keep reducing until the crash stops us.
				for i := 0; i < 1000; i++ {
					if err := c.Allreduce(buf, tensor.Sum); err != nil {
						return err
					}
				}
				return nil
			})
			for r, err := range errs {
				if r == victim {
					continue
				}
				wantPeerError(t, "allreduce during the crash", err, victim, "lost the connection to rank 2")
				later := cs[r].Barrier()
				wantPeerError(t, "barrier after the crash", later, victim, "rank 2")
			}
			if errs[victim] == nil {
				t.Errorf("the crashed rank's own allreduce succeeded")
			}
		})
	}
}

// TestAbortWorld: a rank aborts the group New made while the others wait in
// a barrier; they learn its rank and cause, and its connections close.
func TestAbortWorld(t *testing.T) {
	leakCheck(t)
	const n = 3
	cs := localGroup(t, n, GroupOptions{Unix: true})
	cause := errors.New("out of memory on the GPU")
	errs := commtest.OnRanks(cs, func(c *Comm) error {
		if c.Rank() == 1 {
			time.Sleep(20 * time.Millisecond)
			if err := c.Abort(cause); err != nil {
				t.Errorf("Abort: %v", err)
			}
			return c.Barrier()
		}
		return c.Barrier()
	})
	if !errors.Is(errs[1], comm.ErrClosed) || !errors.Is(errs[1], cause) {
		t.Errorf("aborting rank's barrier: %v, want ErrClosed wrapping its cause", errs[1])
	}
	for _, r := range []int{0, 2} {
		wantPeerError(t, "barrier during the abort", errs[r], 1, cause.Error())
		wantPeerError(t, "allreduce after the abort", cs[r].Allreduce(tensor.New(tensor.Int8, 3), tensor.Sum), 1, cause.Error())
	}
}

// TestCloseWhileOthersWait: a rank that closes its communicator leaves the
// others' calls that need it failing with a PeerError saying so.
func TestCloseWhileOthersWait(t *testing.T) {
	leakCheck(t)
	cs := localGroup(t, 2, GroupOptions{})
	done := make(chan error)
	go func() { done <- cs[1].Barrier() }()
	time.Sleep(20 * time.Millisecond)
	if err := cs[0].Close(); err != nil {
		t.Fatal(err)
	}
	wantPeerError(t, "barrier while the peer closes", <-done, 0, "closed its communicator")
	if err := cs[0].Barrier(); !errors.Is(err, comm.ErrClosed) {
		t.Errorf("barrier after Close: %v, want ErrClosed", err)
	}
	if err := cs[0].Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestConnectTimeoutNamesMissing: a rank that never starts is named, with
// its host, on every rank that waited for it.
func TestConnectTimeoutNamesMissing(t *testing.T) {
	leakCheck(t)
	const n = 3
	hosts := []string{"alpha", "alpha", "bravo"}
	lns := make([]*Listeners, n)
	peers := make([]Peer, n)
	for r := range n {
		l, err := Listen(hosts[r], "127.0.0.1:0", "")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		lns[r], peers[r] = l, l.Peer()
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			c, err := New(context.Background(), Config{Rank: r, Peers: peers, Secret: []byte("0123456789abcdef"), Listeners: lns[r], ConnectTimeout: 300 * time.Millisecond})
			if c != nil {
				c.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		var ce *ConnectError
		if !errors.As(err, &ce) || len(ce.Missing) != 1 || ce.Missing[0] != 2 {
			t.Errorf("rank %d: %v, want a *ConnectError missing rank 2", r, err)
			continue
		}
		if !strings.Contains(err.Error(), "2 (host bravo)") || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("rank %d: %q does not name rank 2 on host bravo, or is no deadline", r, err)
		}
	}
}

func TestPortInUse(t *testing.T) {
	a, err := Listen("local", "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, err = Listen("local", a.Peer().TCP, "")
	if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), a.Peer().TCP) {
		t.Errorf("Listen on a port in use: %v, want an error naming the address and saying it is in use", err)
	}
}

func TestListenRejectsLongSocketPath(t *testing.T) {
	_, err := Listen("local", "127.0.0.1:0", "/tmp/"+strings.Repeat("d", 120))
	if err == nil || !strings.Contains(err.Error(), "107") {
		t.Errorf("Listen with a long socket path: %v, want an error about the length", err)
	}
}

func TestUnixSocketRemovedAtClose(t *testing.T) {
	l, err := Listen("local", "127.0.0.1:0", shortDir(t))
	if err != nil {
		t.Fatal(err)
	}
	p := l.Peer().Unix
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("socket file: %v", err)
	}
	l.Close()
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("socket file still there after Close: %v", err)
	}
}

// TestMismatchWithCheckOff: with the agreement check off, buffers of
// different lengths still fail on every rank (the frames' lengths and
// fingerprints tell), and nothing hangs.
func TestMismatchWithCheckOff(t *testing.T) {
	leakCheck(t)
	for _, size := range []int{4, 1 << 20} {
		cs := localGroup(t, 3, GroupOptions{})
		errs := commtest.OnRanks(cs, func(c *Comm) error {
			c.SetCheck(false)
			return c.Allreduce(tensor.New(tensor.Float32, size+c.Rank()/2), tensor.Sum)
		})
		for r, err := range errs {
			if err == nil {
				t.Errorf("%d elements, rank %d: no error", size, r)
			}
		}
		for _, c := range cs {
			c.Close()
		}
	}
}

// TestSplitLocalByHost: SplitLocal groups the ranks by Host.
func TestSplitLocalByHost(t *testing.T) {
	leakCheck(t)
	hosts := []string{"a", "b", "a", "b", "b"}
	cs := localGroup(t, len(hosts), GroupOptions{Unix: true, Hosts: hosts})
	errs := commtest.OnRanks(cs, func(c *Comm) error {
		loc, err := c.SplitLocal()
		if err != nil {
			return err
		}
		defer loc.Close()
		want := map[string][]int{"a": {0, 2}, "b": {1, 3, 4}}[hosts[c.Rank()]]
		got := make([]int64, loc.Size())
		ones := make([]int, loc.Size())
		for i := range ones {
			ones[i] = 1
		}
		if err := loc.Allgatherv(tensor.FromInt64([]int64{int64(c.Rank())}), tensor.FromInt64(got), ones); err != nil {
			return err
		}
		for i, w := range want {
			if i >= len(got) || got[i] != int64(w) {
				t.Errorf("rank %d: local group %v, want %v", c.Rank(), got, want)
				break
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestListenReplacesStaleSocket: a socket file left at the path this
// process would use next (by a killed process that had the same pid) does
// not stop the next Listen.
func TestListenReplacesStaleSocket(t *testing.T) {
	dir := t.TempDir()
	next := filepath.Join(dir, fmt.Sprintf("ghv-%d-%d.sock", os.Getpid(), sockSeq.Load()+1))
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: next, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close() // the file stays, as a killed process leaves it
	if _, err := os.Stat(next); err != nil {
		t.Fatalf("the stale socket file is gone already: %v", err)
	}
	l, err := Listen("local", "127.0.0.1:0", dir)
	if err != nil {
		t.Fatalf("Listen over a stale socket file: %v", err)
	}
	defer l.Close()
	if l.path != next {
		t.Fatalf("listened on %s, want %s", l.path, next)
	}
}
