package commtest

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// faultCases check what the ranks of a group learn when one of them tears
// it down with comm.Aborter. Each case works on a group split off the one
// under test, so that the latter stays usable; where that group is not a
// comm.Aborter (on every rank alike: MPI, whose abort ends the job) the case
// checks only the split and passes.
func faultCases() []Case {
	return []Case{
		{Name: "fault/abort-delivers-peer-error", MinRanks: 2, Run: abortDelivers},
		{Name: "fault/first-abort-wins", MinRanks: 2, Run: firstAbortWins},
	}
}

// abortable splits a copy of c's group and returns it with its Aborter, or
// ok false (on every rank) when the split failed or the copy cannot abort.
func abortable(rep *report, c comm.Communicator, what string) (sub comm.Communicator, ab comm.Aborter, ok bool) {
	sub, err := c.Split(0, c.Rank())
	rep.ok(what+": split", err)
	if !allOK(c, err == nil && sub != nil) {
		if err == nil {
			rep.errorf("%s: split failed on some rank", what)
		}
		return nil, nil, false
	}
	ab, isAborter := sub.(comm.Aborter)
	if !allOK(c, isAborter) {
		rep.ok(what+": close", sub.Close())
		return nil, nil, false
	}
	return sub, ab, true
}

// abortCase runs body, with this rank's report, on a group split from c
// whose members can abort, then closes that group and checks that c still
// works (after names the moment). Where the transport's groups cannot
// abort, body is skipped.
func abortCase(c comm.Communicator, what, after string, body func(rep *report, sub comm.Communicator, ab comm.Aborter)) error {
	var rep report
	sub, ab, ok := abortable(&rep, c, what)
	if !ok {
		alive(&rep, c, "after the "+what+" case")
		return rep.err()
	}
	body(&rep, sub, ab)
	rep.ok(what+": close after the abort", sub.Close())
	alive(&rep, c, after)
	return rep.err()
}

// peerError checks that err, from a rank other than the one that aborted,
// is a *comm.PeerError naming rank and, if the transport carried it, cause.
func peerError(rep *report, what string, err error, rank int, cause error) {
	var pe *comm.PeerError
	switch {
	case !errors.As(err, &pe) || !errors.Is(err, comm.ErrClosed):
		rep.errorf("%s: %v, want a *comm.PeerError matching comm.ErrClosed", what, err)
	case pe.Rank != rank:
		rep.errorf("%s: %v names rank %d, want rank %d (the one that aborted)", what, err, pe.Rank, rank)
	case pe.Cause != "" && pe.Cause != cause.Error():
		rep.errorf("%s: %v: cause %q, want %q (or none, where the transport cannot carry it)", what, err, pe.Cause, cause)
	}
}

// ownAbort checks that err, on the rank that aborted, matches
// comm.ErrClosed and names the rank's own cause.
func ownAbort(rep *report, what string, err error, cause error) {
	var pe *comm.PeerError
	if !errors.Is(err, comm.ErrClosed) || errors.As(err, &pe) || !strings.Contains(err.Error(), cause.Error()) {
		rep.errorf("%s: %v, want comm.ErrClosed naming this rank's cause %q", what, err, cause)
	}
}

// abortDelivers: the last rank aborts while (or before) the others wait in
// a barrier; they get a *comm.PeerError naming it, in that barrier and in a
// later allreduce, and it gets its own cause back.
func abortDelivers(c comm.Communicator) error {
	const what = "abort"
	return abortCase(c, what, "after a split group was aborted", func(rep *report, sub comm.Communicator, ab comm.Aborter) {
		last := sub.Size() - 1
		cause := fmt.Errorf("commtest: rank %d gives up", last)
		if sub.Rank() == last {
			rep.ok(what, ab.Abort(cause))
			ownAbort(rep, "barrier after this rank's abort", sub.Barrier(), cause)
		} else {
			peerError(rep, "barrier while another rank aborts", sub.Barrier(), last, cause)
			v := []float32{1}
			peerError(rep, "allreduce after the abort", sub.Allreduce(tensor.FromFloat32(v), tensor.Sum), last, cause)
			if v[0] != 1 {
				rep.errorf("allreduce after the abort changed the buffer to %v", v)
			}
		}
	})
}

// firstAbortWins: rank 0 aborts; once every rank knows it has (each has
// seen its barrier on the aborted group fail, then the ranks meet in the
// parent group), rank 1 aborts with another cause and closes: every rank
// still sees rank 0's abort. (A barrier in the parent alone would not do:
// a transport's barrier need not hear from every rank directly, so rank
// 0's abort could still be on its way to a rank when rank 1's arrives.)
func firstAbortWins(c comm.Communicator) error {
	return abortCase(c, "first abort", "after a split group was aborted twice", func(rep *report, sub comm.Communicator, ab comm.Aborter) {
		first := errors.New("commtest: first abort")
		second := errors.New("commtest: second abort")
		if sub.Rank() == 0 {
			rep.ok("abort", ab.Abort(first))
		} else {
			peerError(rep, "barrier on the group rank 0 aborts", sub.Barrier(), 0, first)
		}
		rep.ok("barrier in the parent after the first abort", c.Barrier())
		if sub.Rank() == 1 {
			rep.ok("second abort", ab.Abort(second))
			rep.ok("close after the aborts", sub.Close())
		}
		rep.ok("barrier in the parent after the second abort", c.Barrier())
		if err := sub.Barrier(); sub.Rank() == 0 {
			ownAbort(rep, "barrier on the first aborting rank", err, first)
		} else {
			peerError(rep, "barrier after two aborts", err, 0, first)
		}
	})
}
