package embedded

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/tensor"
)

func localGroupLog(t *testing.T, n int, logf func(string, ...any)) []*Comm {
	t.Helper()
	return localGroup(t, n, GroupOptions{Unix: true, Logf: logf})
}

// ringMaps counts this process's mappings of ring memory files.
func ringMaps(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "memfd:"+shmName)
}

// needShm checks, after a large collective, that every rank sends to its
// right neighbour in the ring through a ring of shared memory, and that
// nothing of it has a name in /dev/shm.
func needShm(t *testing.T, cs []*Comm) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("shared memory is Linux only")
	}
	n := len(cs)
	for _, c := range cs {
		right := c.m.conns[(c.Rank()+1)%n]
		if right.tx == nil {
			t.Fatalf("rank %d has no ring to rank %d", c.Rank(), right.peer)
		}
	}
	if ringMaps(t) == 0 {
		t.Errorf("no ring memory file is mapped")
	}
	if left, _ := filepath.Glob(fmt.Sprintf("/dev/shm/gohorovod-%d-*", os.Getpid())); len(left) != 0 {
		t.Errorf("files in /dev/shm: %v", left)
	}
}

// TestShmCollectives: ranks on one host move large payloads through shared
// memory (with payloads below the threshold on the socket, in one call),
// and get the right values.
func TestShmCollectives(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("np%d", n), func(t *testing.T) {
			leakCheck(t)
			cs := localGroup(t, n, GroupOptions{Unix: true})
			// Allreduce: not a multiple of the slot or the ring's piece.
			const count = 3<<20 + 12345
			errs := commtest.OnRanks(cs, func(c *Comm) error {
				v := make([]float32, count)
				for i := range v {
					v[i] = float32((i%1000)*(c.Rank()+1)) / 8
				}
				if err := c.Allreduce(tensor.FromFloat32(v), tensor.Sum); err != nil {
					return err
				}
				tri := float32(n * (n + 1) / 2)
				for i, x := range v {
					if want := float32(i%1000) * tri / 8; x != want {
						return fmt.Errorf("allreduce: element %d is %v, want %v", i, x, want)
					}
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			needShm(t, cs)
			// Alltoallv: block (s, d) has (s+1)*(d+1)*40000 + s elements,
			// from 160 KB to well past a slot; block (0, 0) is small.
			size := func(s, d int) int {
				if s == 0 && d == 0 {
					return 7
				}
				return (s+1)*(d+1)*40000 + s
			}
			errs = commtest.OnRanks(cs, func(c *Comm) error {
				me := c.Rank()
				sc, rc := make([]int, n), make([]int, n)
				var send []float32
				for d := range n {
					sc[d], rc[d] = size(me, d), size(d, me)
					for i := range sc[d] {
						send = append(send, float32(me*1000+d)+float32(i%97))
					}
				}
				tot := 0
				for _, k := range rc {
					tot += k
				}
				recv := make([]float32, tot)
				if err := c.Alltoallv(tensor.FromFloat32(send), sc, tensor.FromFloat32(recv), rc); err != nil {
					return err
				}
				off := 0
				for s := range n {
					for i := range rc[s] {
						if want := float32(s*1000+me) + float32(i%97); recv[off+i] != want {
							return fmt.Errorf("alltoallv: from rank %d, element %d is %v, want %v", s, i, recv[off+i], want)
						}
					}
					off += rc[s]
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			// Allgatherv with uneven counts around the threshold.
			counts := make([]int, n)
			tot := 0
			for r := range n {
				counts[r] = 16<<10 + r*300007
				tot += counts[r]
			}
			errs = commtest.OnRanks(cs, func(c *Comm) error {
				me := c.Rank()
				send := make([]float32, counts[me])
				for i := range send {
					send[i] = float32(me) + float32(i%89)/128
				}
				recv := make([]float32, tot)
				if err := c.Allgatherv(tensor.FromFloat32(send), tensor.FromFloat32(recv), counts); err != nil {
					return err
				}
				off := 0
				for s := range n {
					for i := range counts[s] {
						if want := float32(s) + float32(i%89)/128; recv[off+i] != want {
							return fmt.Errorf("allgatherv: from rank %d, element %d is %v, want %v", s, i, recv[off+i], want)
						}
					}
					off += counts[s]
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// TestShmPeerDiesWhileReceiverWaits: a rank announces the first slot of a
// frame, then its process dies; the receiver, waiting for the next slot,
// fails with a *comm.PeerError naming it, and nothing hangs or leaks.
func TestShmPeerDiesWhileReceiverWaits(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("shared memory is Linux only")
	}
	const n, victim = 3, 2
	stalled, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	shmTestHook = func(c *conn) {
		if c.m.rank == victim {
			once.Do(func() {
				close(stalled)
				<-release
			})
		}
	}
	t.Cleanup(func() { shmTestHook = nil })
	leakCheck(t)
	cs := localGroup(t, n, GroupOptions{Unix: true})
	go func() {
		<-stalled
		crash(cs[victim])
		close(release)
	}()
	errs := commtest.OnRanks(cs, func(c *Comm) error {
		buf := tensor.New(tensor.Float32, 8<<20)
		for range 100 {
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
		wantPeerError(t, "barrier after the crash", cs[r].Barrier(), victim, "rank 2")
	}
	if errs[victim] == nil {
		t.Errorf("the crashed rank's own allreduce succeeded")
	}
}

// TestShmFallback: where no ring can be made, same-host ranks keep their
// Unix sockets, say why, and large collectives still work.
func TestShmFallback(t *testing.T) {
	shmCreateHook = func(int) (int, []byte, error) { return -1, nil, errors.New("no memory files here") }
	t.Cleanup(func() { shmCreateHook = nil })
	leakCheck(t)
	var mu sync.Mutex
	var said []string
	cs := localGroupLog(t, 2, func(format string, args ...any) {
		mu.Lock()
		said = append(said, fmt.Sprintf(format, args...))
		mu.Unlock()
	})
	errs := commtest.OnRanks(cs, func(c *Comm) error {
		v := make([]float32, 1<<20)
		for i := range v {
			v[i] = 1
		}
		if err := c.Allreduce(tensor.FromFloat32(v), tensor.Sum); err != nil {
			return err
		}
		if v[12345] != 2 {
			return fmt.Errorf("got %v, want 2", v[12345])
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	for _, c := range cs {
		for p, cn := range c.m.conns {
			if cn != nil && (cn.tx != nil || !cn.txOff) {
				t.Errorf("rank %d: ring to rank %d %v, gave up %v; want no ring, given up", c.Rank(), p, cn.tx != nil, cn.txOff)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(said) != 2 || !strings.Contains(said[0], "no memory files here") {
		t.Errorf("logged %q, want one line per rank saying why", said)
	}
}

// TestShmNothingOutlives: rings exist only between ranks that send large
// payloads, and none outlives the group: after Close no ring is mapped.
func TestShmNothingOutlives(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("shared memory is Linux only")
	}
	before := ringMaps(t)
	cs := localGroup(t, 4, GroupOptions{Unix: true})
	small := commtest.OnRanks(cs, func(c *Comm) error {
		return c.Allreduce(tensor.New(tensor.Float32, 1024), tensor.Sum)
	})
	for r, err := range small {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if got := ringMaps(t); got != before {
		t.Errorf("%d rings mapped after small collectives only, want none", got-before)
	}
	big := commtest.OnRanks(cs, func(c *Comm) error {
		return c.Allreduce(tensor.New(tensor.Float32, 1<<20), tensor.Sum)
	})
	for r, err := range big {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if got := ringMaps(t) - before; got == 0 {
		t.Errorf("no ring mapped after a 4 MiB allreduce")
	}
	for _, c := range cs {
		c.Close()
	}
	if got := ringMaps(t); got != before {
		t.Errorf("%d ring mappings left after Close", got-before)
	}
}

// TestShmReduceBits: the ring reduces pieces that come through shared
// memory straight from the slots; the results are the same, bit for bit, on
// every rank and as over TCP (no shared memory), with values whose sums
// depend on the order of the additions, for Allreduce and ReduceScatter.
func TestShmReduceBits(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("np%d", n), func(t *testing.T) {
			leakCheck(t)
			const count = 1<<20 + 4321
			val := func(r, i int) float32 {
				return float32((i*7919+r*104729)%100003)*1e-3 + float32(r+1)*1e5
			}
			counts := make([]int, n)
			for r := range n {
				counts[r] = count / n
			}
			counts[n-1] += count % n
			run := func(o GroupOptions, shm bool) ([][]float32, [][]float32) {
				cs := localGroup(t, n, o)
				all, rs := make([][]float32, n), make([][]float32, n)
				errs := commtest.OnRanks(cs, func(c *Comm) error {
					me := c.Rank()
					v := make([]float32, count)
					for i := range v {
						v[i] = val(me, i)
					}
					src := tensor.FromFloat32(append([]float32(nil), v...))
					if err := c.Allreduce(tensor.FromFloat32(v), tensor.Sum); err != nil {
						return err
					}
					all[me] = v
					out := make([]float32, counts[me])
					if err := c.ReduceScatter(src, tensor.FromFloat32(out), counts, tensor.Sum); err != nil {
						return err
					}
					rs[me] = out
					return nil
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				if shm {
					needShm(t, cs)
				}
				return all, rs
			}
			sAll, sRS := run(GroupOptions{Unix: true}, true)
			tAll, tRS := run(GroupOptions{}, false)
			for r := range n {
				for i := range count {
					if math.Float32bits(sAll[r][i]) != math.Float32bits(tAll[0][i]) {
						t.Fatalf("allreduce: rank %d element %d is %v through shared memory, %v over TCP", r, i, sAll[r][i], tAll[0][i])
					}
				}
				for i := range counts[r] {
					if math.Float32bits(sRS[r][i]) != math.Float32bits(tRS[r][i]) {
						t.Fatalf("reducescatter: rank %d element %d is %v through shared memory, %v over TCP", r, i, sRS[r][i], tRS[r][i])
					}
				}
			}
		})
	}
}
