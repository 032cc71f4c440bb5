package mpi

import (
	"testing"
	"time"
)

// TestYieldSlice checks that yieldSlice starts a new slice only once the
// last one is older than sliceNS.
func TestYieldSlice(t *testing.T) {
	yieldSlice()
	first := sliceStart.Load()
	yieldSlice()
	if got := sliceStart.Load(); got != first {
		t.Fatalf("a second call within the slice started a new one: %d, then %d", first, got)
	}
	time.Sleep(time.Duration(sliceNS) + time.Millisecond)
	yieldSlice()
	if got := sliceStart.Load(); got-first < sliceNS {
		t.Fatalf("a call after the slice ended kept the old start: %d, then %d", first, got)
	}
}
