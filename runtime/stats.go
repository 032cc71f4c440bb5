package runtime

import (
	"sync/atomic"
	"time"
)

// Stats counts the background loop's work since Init.
type Stats struct {
	Cycles int64 // cycles run
	// Requests counts the operations enqueued (each tensor of a grouped
	// call is one), counted when enqueued rather than when performed.
	Requests     int64
	ActiveCycles int64         // cycles that performed at least one operation
	ActiveBusy   time.Duration // time spent inside active cycles (not sleeping)
	IdleBusy     time.Duration // time spent inside cycles that performed nothing
	SlowCycles   int64         // cycles that needed full negotiation (gather and broadcast)
	// CachedCycles and CachedBusy count the active cycles that ran from the
	// response cache alone (no negotiation) and the time spent inside them:
	// the steady-state cost of a training step's cycle.
	CachedCycles int64
	CachedBusy   time.Duration
	// FusedCopied and FusedInPlace count the bytes of fused allreduces
	// that went through the fusion buffer (copied in and out) and those
	// reduced where they lie, because the tensors they span follow one
	// another in one allocation (tensor.NewFlat; see tensor.Follows).
	FusedCopied, FusedInPlace int64
	// FusedWhole counts the fused responses that lay in one run of memory
	// on every rank and were reduced there in transport chunks rather
	// than in fusion pieces (HOROVOD_FUSION_THRESHOLD's buffer is not
	// used for them).
	FusedWhole int64
	// Tuning reports that autotuning (HOROVOD_AUTOTUNE) is on and has
	// not finished: the settings may still change. Every rank turns it
	// off at the same cycle.
	Tuning bool
	// HierarchicalAllreduces and HierarchicalAllgathers count the
	// collectives that ran by the hierarchical algorithms
	// (HOROVOD_HIERARCHICAL_ALLREDUCE and _ALLGATHER where a process set
	// spans several nodes), in every process set, each transport call once
	// (each chunk of a chunked allreduce): they stay zero where the knobs
	// are off or ignored (one node), which is how to tell.
	HierarchicalAllreduces, HierarchicalAllgathers int64
	// StaticLocks counts the times the static schedule locked
	// (GOHOROVOD_STATIC_SCHEDULE), StaticUnits the units it performed
	// without a cycle's agreement, and StaticDissolved the times it ended
	// and the loop went back to negotiation.
	StaticLocks, StaticUnits, StaticDissolved int64
	// StaticRuns counts the times the static schedule reduced the units
	// one header performed in one call where they lay, because they were
	// one run of memory on every rank (an optimizer's flat gradients): no
	// fusion plan, copy or layout agreement. Those of more than one
	// tensor count in FusedWhole and FusedInPlace too.
	StaticRuns int64
	// SentBytes counts the bytes this rank sent for the host collectives
	// it performed, as the bandwidth-optimal algorithms send them (the
	// "bus bytes" of nccl-tests): 2(n−1)/n·S for an allreduce of S bytes,
	// (n−1)/n·S for a reducescatter of S bytes, (n−1)·S for an allgather
	// of this rank's S bytes, the rows sent to the other ranks for an
	// alltoall, and S on the root of a broadcast. Negotiation and GPU
	// collectives are not counted. Compare algorithms by its growth per
	// step.
	SentBytes int64
}

type stats struct {
	cycles, active, slow atomic.Int64
	requests             atomic.Int64
	activeNs, idleNs     atomic.Int64
	cached, cachedNs     atomic.Int64
	copied, inPlace      atomic.Int64
	whole                atomic.Int64
	tuning               atomic.Bool
	hierAR, hierAG       atomic.Int64

	staticLocks, staticUnits, staticDissolved atomic.Int64
	runs                                      atomic.Int64
	sent                                      atomic.Int64
}

// Stats returns the loop's counters.
func (r *Runtime) Stats() Stats {
	s := &r.stats
	return Stats{
		Cycles:       s.cycles.Load(),
		Requests:     s.requests.Load(),
		ActiveCycles: s.active.Load(),
		ActiveBusy:   time.Duration(s.activeNs.Load()),
		IdleBusy:     time.Duration(s.idleNs.Load()),
		SlowCycles:   s.slow.Load(),
		CachedCycles: s.cached.Load(),
		CachedBusy:   time.Duration(s.cachedNs.Load()),
		FusedCopied:  s.copied.Load(),
		FusedInPlace: s.inPlace.Load(),
		FusedWhole:   s.whole.Load(),
		Tuning:       s.tuning.Load(),

		HierarchicalAllreduces: s.hierAR.Load(),
		HierarchicalAllgathers: s.hierAG.Load(),

		StaticLocks:     s.staticLocks.Load(),
		StaticUnits:     s.staticUnits.Load(),
		StaticDissolved: s.staticDissolved.Load(),
		StaticRuns:      s.runs.Load(),
		SentBytes:       s.sent.Load(),
	}
}

// sentShare returns part/whole of b bytes: what a rank sends of an
// S-byte collective whose algorithm moves part/whole of S per rank.
func sentShare(b, part, whole int) int64 {
	if whole <= 0 {
		return 0
	}
	return int64(b) * int64(part) / int64(whole)
}
