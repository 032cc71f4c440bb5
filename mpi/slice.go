package mpi

import (
	"runtime"
	"sync/atomic"
	"time"
)

// sliceNS is how long a goroutine may go on calling MPI before yieldSlice
// makes it pass through Go's scheduler.
const sliceNS = int64(time.Millisecond)

var (
	sliceStart atomic.Int64
	sliceEpoch = time.Now()
)

// yieldSlice passes through Go's scheduler (runtime.Gosched) when the last
// pass was more than sliceNS ago.
//
// Why: Go's sysmon thread takes the P away from a goroutine that has run on
// one scheduling tick for more than 10 ms, and a goroutine that only makes
// cgo calls never starts a new tick. From then on every blocking MPI call
// longer than a sysmon tick loses its P: sysmon wakes another thread to
// take it, that thread finds nothing to do and sleeps again, and the call's
// return must win a P back. On a machine with a core per rank those threads
// take the core from the ranks' MPI progress, and a large MPI_Allreduce
// from Go ran well behind the same call from C, with several context
// switches a call (docs/BENCHMARKS.md has the measurement).
func yieldSlice() {
	now := int64(time.Since(sliceEpoch))
	if now-sliceStart.Load() < sliceNS {
		return
	}
	sliceStart.Store(now)
	runtime.Gosched()
}
