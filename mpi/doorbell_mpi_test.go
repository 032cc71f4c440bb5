//go:build mpi && cgo

package mpi

import (
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/tensor"
)

// bellComm returns a duplicate of the world with the node's doorbell.
func bellComm(t *testing.T) *Comm {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the doorbell needs Linux")
	}
	d, err := world(t).Dup()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free() })
	if err := d.EnableDoorbell(); err != nil {
		t.Fatal(err)
	}
	if d.bell == nil {
		t.Fatal("EnableDoorbell returned no error and set no doorbell")

	}
	return d
}

// TestDoorbellWakesTheEarlyRank: rank 0 enters a patient allreduce while
// the others sleep 300 ms, with sleeps allowed to grow to a second. On a
// timer rank 0 would notice their arrival one of its sleeps late, some
// 350 ms; the doorbell wakes it when the last local rank posts. It also
// spends little CPU while it waits.
func TestDoorbellWakesTheEarlyRank(t *testing.T) {
	d := bellComm(t)
	if d.Size() < 2 {
		t.Skip("needs two ranks")
	}
	if err := d.Barrier(); err != nil {
		t.Fatal(err)
	}
	const late = 300 * time.Millisecond
	var posted int64
	if d.Rank() != 0 {
		time.Sleep(late)
		posted = time.Now().UnixNano()
	}
	buf := tensor.FromFloat64([]float64{float64(d.Rank())})
	t0, c0 := time.Now(), cpuNow(t)
	err := d.AllreducePatient(buf, tensor.Sum, Patience{Spin: 200 * time.Microsecond, First: 10 * time.Microsecond, Max: time.Second})
	done, cpu := time.Now(), cpuNow(t)-c0
	if err != nil {
		t.Fatal(err)
	}
	if want := float64(d.Size()*(d.Size()-1)) / 2; buf.Float64s()[0] != want {
		t.Fatalf("sum %v, want %v", buf.Float64s()[0], want)
	}
	// The latest arrival, by the clock every process on the node shares.
	last := tensor.FromInt64([]int64{posted})
	if err := d.Allreduce(last, tensor.Max); err != nil {
		t.Fatal(err)
	}
	if d.Rank() != 0 {
		return
	}
	lag := done.Sub(time.Unix(0, last.Int64s()[0]))
	t.Logf("rank 0: woken %v after the last arrival; %v of CPU in a %v wait", lag, cpu, done.Sub(t0))
	if lag > 150*time.Millisecond {
		t.Errorf("rank 0 finished %v after the last rank posted: it slept on its timer, not on the doorbell", lag)
	}
	if wall := done.Sub(t0); cpu > wall/4 {
		t.Errorf("rank 0 used %v of CPU in a %v wait: it spun", cpu, wall)
	}
}

// TestDoorbellManyCollectives runs patient allreduces back to back, a
// random rank late each time, with the agreement check on (two posted
// collectives a call) and off (one), and a blocking one between (none):
// the ranks' counts stay in step, and every sum is right.
func TestDoorbellManyCollectives(t *testing.T) {
	for _, whole := range []bool{true, false} {
		t.Run(map[bool]string{true: "one node", false: "as if across nodes"}[whole], func(t *testing.T) {
			manyCollectives(t, whole)
		})
	}
}

// manyCollectives is TestDoorbellManyCollectives's body. whole false makes
// the doorbell behave as where some ranks are on other nodes: the
// nonblocking collective, tested, the doorbell only waking its waits.
func manyCollectives(t *testing.T, whole bool) {
	d := bellComm(t)
	if !d.bell.whole {
		t.Fatal("every rank runs on this machine, yet the doorbell says some are elsewhere")
	}
	d.bell.whole = whole
	rng := rand.New(rand.NewPCG(7, 7)) // the same sequence on every rank
	p := DefaultPatience(200 * time.Microsecond)
	for i := range 60 {
		d.SetCheck(i%2 == 0)
		if late := rng.IntN(d.Size()); late == d.Rank() {
			time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
		} else {
			rng.IntN(3)
		}
		buf := tensor.FromFloat64([]float64{float64(d.Rank() + i), 1})
		if err := d.AllreducePatient(buf, tensor.Sum, p); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		n := float64(d.Size())
		if got, want := buf.Float64s(), []float64{n*(n-1)/2 + n*float64(i), n}; got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("call %d: %v, want %v", i, got, want)
		}
		if i%10 == 9 {
			if err := d.Allreduce(tensor.FromFloat64([]float64{1}), tensor.Sum); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.SetCheck(true)
	if err := d.Free(); err != nil {
		t.Fatal(err)
	}
	if d.bell != nil {
		t.Fatal("Free kept the doorbell")
	}
}

// TestDoorbellFailsOnEveryRank: when the node's first rank cannot make the
// doorbell's memory, every rank gets its error and none uses a doorbell;
// patient waits still work, on their timers.
func TestDoorbellFailsOnEveryRank(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the doorbell needs Linux")
	}
	d, err := world(t).Dup()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	if d.Rank() == 0 {
		bellDir = func() string { return "/nonexistent-gohorovod-dir" }
		defer func() { bellDir = defaultBellDir }()
	}
	err = d.EnableDoorbell()
	if err == nil || !strings.Contains(err.Error(), "doorbell") {
		t.Fatalf("rank %d: %v, want the doorbell's error", d.Rank(), err)
	}
	if d.bell != nil {
		t.Fatalf("rank %d kept a doorbell after the failure", d.Rank())
	}
	buf := tensor.FromFloat64([]float64{1})
	if err := d.AllreducePatient(buf, tensor.Sum, DefaultPatience(200*time.Microsecond)); err != nil || buf.Float64s()[0] != float64(d.Size()) {
		t.Fatalf("a patient allreduce after the failure: %v, %v", err, buf.Float64s())
	}
}
