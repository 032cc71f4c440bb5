package commtest

import (
	"errors"
	"fmt"
	"math/bits"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// Case is one conformance test. Every rank of a group calls Run with its own
// communicator, in the same order as the other cases; Run performs the same
// collectives on every rank whatever it finds and returns what was wrong on
// this rank (nil when nothing was).
type Case struct {
	Name string
	// MinRanks is the smallest group the case means something for; smaller
	// groups skip it (every rank alike). Zero means any group.
	MinRanks int
	Run      func(c comm.Communicator) error
}

// RunGroup runs every case as a subtest over the members of one group, each
// rank in its own goroutine, and reports each rank's error. comms[i] must be
// rank i of a group of len(comms) ranks.
func RunGroup(t *testing.T, comms []comm.Communicator) {
	t.Helper()
	n := len(comms)
	for i, c := range comms {
		if c.Size() != n || c.Rank() != i {
			t.Fatalf("comms[%d] is rank %d of %d; want rank %d of %d", i, c.Rank(), c.Size(), i, n)
		}
	}
	for _, tc := range Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			if n < tc.MinRanks {
				t.Skipf("needs %d ranks, the group has %d", tc.MinRanks, n)
			}
			for r, err := range OnRanks(comms, tc.Run) {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// RunRank runs every case as a subtest on this rank; every rank of c's group
// must call it at the same time (typically each process of an mpirun job,
// from its test). After each case the ranks agree, through c itself, on who
// failed, so that every rank fails the same subtests; if c cannot carry
// that agreement, RunRank stops, on every rank that can tell.
func RunRank(t *testing.T, c comm.Communicator) {
	t.Helper()
	for _, tc := range Cases() {
		broken := false
		t.Run(tc.Name, func(t *testing.T) {
			if c.Size() < tc.MinRanks {
				t.Skipf("needs %d ranks, the group has %d", tc.MinRanks, c.Size())
			}
			err := tc.Run(c)
			if err != nil {
				t.Errorf("rank %d: %v", c.Rank(), err)
			}
			failed, aerr := whoFailed(c, err != nil)
			if aerr != nil {
				broken = true
				t.Errorf("rank %d: agreeing on the outcome: %v", c.Rank(), aerr)
				return
			}
			if err == nil && failed != 0 {
				t.Errorf("rank %d passed, but the case failed on rank(s) %s", c.Rank(), rankSet(failed))
			}
		})
		if broken {
			t.Fatalf("rank %d: the communicator can no longer agree; stopping the suite", c.Rank())
		}
	}
}

// whoFailed returns the set of failing ranks as a bit mask (ranks from 63 on
// share bit 63).
func whoFailed(c comm.Communicator, failed bool) (uint64, error) {
	mask := []uint64{0}
	if failed {
		mask[0] = 1 << min(c.Rank(), 63)
	}
	err := c.Allreduce(tensor.FromUint64(mask), tensor.BitOr)
	return mask[0], err
}

func rankSet(mask uint64) string {
	var rs []int
	for mask != 0 {
		b := bits.TrailingZeros64(mask)
		rs = append(rs, b)
		mask &^= 1 << b
	}
	return fmt.Sprint(rs)
}

// report collects what went wrong on one rank during one case.
type report struct{ errs []error }

// ok records err, if any, as a failure of the step named what.
func (r *report) ok(what string, err error) {
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %w", what, err))
	}
}

// fails records a failure if the step named what did not return an error.
func (r *report) fails(what string, err error) {
	if err == nil {
		r.errs = append(r.errs, fmt.Errorf("%s: returned no error, want an error on every rank", what))
	}
}

// check records err, which already names its step.
func (r *report) check(err error) {
	if err != nil {
		r.errs = append(r.errs, err)
	}
}

func (r *report) errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf(format, args...))
}

func (r *report) err() error { return errors.Join(r.errs...) }
