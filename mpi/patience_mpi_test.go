//go:build mpi && cgo

package mpi

import (
	"syscall"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/tensor"
)

// TestAllreducePatientEveryDTypeAndOp: the patient allreduce gives what
// the blocking one gives, on every dtype and reduction, and with Max 0
// (the blocking call).
func TestAllreducePatientEveryDTypeAndOp(t *testing.T) {
	w := world(t)
	const n = 5
	for _, p := range []Patience{DefaultPatience(200 * time.Microsecond), {}} {
		for _, dt := range tensor.DTypes() {
			for _, op := range tensor.ReduceOps() {
				if !op.Supports(dt) {
					continue
				}
				buf := input(dt, op, w.Rank(), w.Size(), n)
				if err := w.AllreducePatient(buf, op, p); err != nil {
					t.Errorf("%+v %v %v: %v", p, dt, op, err)
					continue
				}
				if want := expected(dt, op, w.Size(), n); string(buf.Bytes()) != string(want) {
					t.Errorf("%+v %v %v on rank %d: got % x, want % x", p, dt, op, w.Rank(), buf.Bytes(), want)
				}
			}
		}
	}
}

// TestAllreducePatientMismatch: arguments that disagree get the same
// error on every rank as the blocking call's.
func TestAllreducePatientMismatch(t *testing.T) {
	w := world(t)
	if w.Size() < 2 {
		t.Skip("needs two ranks")
	}
	buf := tensor.New(tensor.Float32, 3+w.Rank())
	err := w.AllreducePatient(buf, tensor.Sum, DefaultPatience(200*time.Microsecond))
	if err == nil {
		t.Fatalf("rank %d: element counts %d differ across ranks, no error", w.Rank(), buf.Len())
	}
	want := w.Allreduce(tensor.New(tensor.Float32, 3+w.Rank()), tensor.Sum)
	if want == nil || err.Error() != want.Error() {
		t.Errorf("rank %d: patient %q, blocking %q", w.Rank(), err, want)
	}
}

func cpuNow(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestAllreducePatientWaitsWithoutSpinning: rank 0 enters the allreduce
// while the other ranks still "compute" (sleep) for 400 ms. The blocking
// MPI_Allreduce spins (or yields) in the library all that time, a core's
// worth of CPU; the patient one sleeps, and rank 0 spends a small part of
// the wait on the CPU.
func TestAllreducePatientWaitsWithoutSpinning(t *testing.T) {
	w := world(t)
	if w.Size() < 2 {
		t.Skip("needs two ranks")
	}
	buf := tensor.FromFloat64([]float64{float64(w.Rank())})
	if err := w.Barrier(); err != nil {
		t.Fatal(err)
	}
	const late = 400 * time.Millisecond
	if w.Rank() != 0 {
		time.Sleep(late)
	}
	t0, c0 := time.Now(), cpuNow(t)
	err := w.AllreducePatient(buf, tensor.Sum, DefaultPatience(time.Millisecond))
	wall, cpu := time.Since(t0), cpuNow(t)-c0
	if err != nil {
		t.Fatal(err)
	}
	if want := float64(w.Size()*(w.Size()-1)) / 2; buf.Float64s()[0] != want {
		t.Errorf("sum %v, want %v", buf.Float64s()[0], want)
	}
	if w.Rank() == 0 {
		if wall < late/2 {
			t.Fatalf("rank 0 waited %v for ranks %v late", wall, late)
		}
		if cpu > wall/4 {
			t.Errorf("rank 0 used %v of CPU in a %v wait for late peers: it spun", cpu, wall)
		}
		t.Logf("rank 0: %v of CPU in a %v wait", cpu, wall)
	}
}

// TestSleepSetsTimerSlack: the patient wait's sleeps run with a timer
// slack of 1 µs, not Linux's default 50 µs, which would stretch its
// first sleeps of 10-40 µs to about 60 µs each.
func TestSleepSetsTimerSlack(t *testing.T) {
	if got := sleepThenSlack(10 * time.Microsecond); got != time.Microsecond && got != -1 {
		t.Fatalf("timer slack after a patient sleep: %v, want 1µs", got)
	}
}
