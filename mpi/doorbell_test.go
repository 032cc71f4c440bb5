package mpi

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// bells maps one doorbell file for locals ranks once per rank, as the
// ranks of a node do (separate mappings of the same pages), and removes
// the file.
func bells(t *testing.T, locals int) []*bell {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the doorbell needs Linux")
	}
	path, mem, unmap, err := createBell(locals)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	bs := make([]*bell, locals)
	for i := range locals {
		if i > 0 {
			if mem, unmap, err = openBell(path, locals); err != nil {
				t.Fatal(err)
			}
		}
		if bs[i], err = newBell(mem, i, locals); err != nil {
			t.Fatal(err)
		}
		bs[i].unmap = unmap
	}
	t.Cleanup(func() {
		for _, b := range bs {
			if err := b.close(); err != nil {
				t.Error(err)
			}
		}
	})
	return bs
}

// TestBellHere counts arrivals: collective k has found every local rank
// once each has posted k times.
func TestBellHere(t *testing.T) {
	bs := bells(t, 3)
	if bs[0].here(1) {
		t.Fatal("nobody posted, yet collective 1 is here")
	}
	for i, b := range bs {
		if k := b.post(); k != 1 {
			t.Fatalf("rank %d's first post is %d", i, k)
		}
		if got := bs[(i+1)%3].here(1); got != (i == 2) {
			t.Fatalf("after %d posts: here(1) %v", i+1, got)
		}
	}
	bs[1].post()
	if bs[0].here(2) || !bs[2].here(1) {
		t.Fatal("one rank ahead must not make collective 2 here")
	}
}

// TestBellWakesSleeper: a rank sleeping on the doorbell (with a cap far
// above the test's delays) is woken by each local arrival, through another
// mapping of the same memory, and returns at once when everyone is here.
func TestBellWakesSleeper(t *testing.T) {
	bs := bells(t, 3)
	const limit = 5 * time.Second
	bs[0].post()
	for _, poster := range []int{1, 2} {
		done := make(chan time.Duration)
		go func() {
			start := time.Now()
			bs[0].sleep(1, limit)
			done <- time.Since(start)
		}()
		time.Sleep(20 * time.Millisecond)
		bs[poster].post()
		if d := <-done; d >= limit {
			t.Fatalf("rank %d's arrival did not wake the sleeper: it slept %v, its whole limit", poster, d)
		}
	}
	start := time.Now()
	bs[0].sleep(1, limit)
	if d := time.Since(start); d >= limit {
		t.Fatalf("every rank is here, yet the sleep took its whole limit (%v)", d)
	}
}

// TestBellNoLostWakeup races posts against sleeps: a sleeper that missed a
// post would sleep its whole limit.
func TestBellNoLostWakeup(t *testing.T) {
	bs := bells(t, 2)
	const limit = 3 * time.Second
	for k := uint64(1); k <= 300; k++ {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			bs[1].post()
		}()
		bs[0].post()
		start := time.Now()
		for !bs[0].here(k) {
			bs[0].sleep(k, limit)
			if d := time.Since(start); d >= limit {
				t.Fatalf("collective %d: the sleeper missed the post and slept %v", k, d)
			}
		}
		wg.Wait()
	}
}

// TestBellArgs rejects a slot outside the ranks and memory too small.
func TestBellArgs(t *testing.T) {
	mem := make([]byte, 4096)
	if _, err := newBell(mem, 2, 2); err == nil {
		t.Fatal("slot 2 of 2 was accepted")
	}
	if _, err := newBell(mem[:64], 0, 2); err == nil {
		t.Fatal("64 bytes for 2 ranks were accepted")
	}
	if runtime.GOOS == "linux" {
		if _, _, err := openBell(os.DevNull, 2); err == nil {
			t.Fatal("opening /dev/null as a doorbell succeeded")
		}
	}
}

// TestBellSpin: a wait spins for its local peers only where they have
// lately arrived within half the patience's spin (the median of the
// latest waits), and at first, before there is any history.
func TestBellSpin(t *testing.T) {
	p := Patience{Spin: 200 * time.Microsecond}
	var b bell
	if got := b.spin(p); got != p.Spin {
		t.Fatalf("no history: spin %v, want %v", got, p.Spin)
	}
	for range 5 {
		b.arrived(2 * time.Millisecond) // a steadily slower peer
	}
	if got := b.spin(p); got != 0 {
		t.Fatalf("peers 2 ms late: spin %v, want none", got)
	}
	for range 4 {
		b.arrived(10 * time.Microsecond)
	}
	if got := b.spin(p); got != 0 {
		t.Fatalf("5 of 9 late: spin %v, want none", got)
	}
	b.arrived(30 * time.Microsecond) // the ring drops a late one
	if got := b.spin(p); got != p.Spin {
		t.Fatalf("5 of 9 together: spin %v, want %v", got, p.Spin)
	}
	for range bellGaps {
		b.arrived(p.Spin/2 + time.Microsecond)
	}
	if got := b.spin(p); got != 0 {
		t.Fatalf("peers just over half the spin late: spin %v, want none", got)
	}
}

// TestBellAwait: await returns on every rank once all have posted, here
// with ranks whose arrivals are staggered by up to 2 ms, over 50
// collectives; none returns before the last arrival.
func TestBellAwait(t *testing.T) {
	bs := bells(t, 3)
	p := Patience{Spin: 200 * time.Microsecond}
	for k := uint64(1); k <= 50; k++ {
		var wg sync.WaitGroup
		errs := make(chan string, 3)
		for i, b := range bs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration((int(k)+i)%3) * time.Millisecond)
				b.await(p)
				for j := range bs {
					if got := atomicSlot(bs[j], j); got < k {
						errs <- fmt.Sprintf("collective %d: rank %d returned before rank %d arrived (%d)", k, i, j, got)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Fatal(e)
		}
	}
	if bs[0].n != 50 {
		t.Fatalf("%d arrivals recorded, want 50", bs[0].n)
	}
}

func atomicSlot(b *bell, i int) uint64 { return atomic.LoadUint64(b.slot(i)) }
