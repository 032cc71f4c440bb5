// Package schedule is the static schedule as a pure, clock-free state
// machine: PyTorch DDP's static_graph idea applied to Horovod's negotiation.
//
// A training step reduces the same named tensors in the same order every
// time. The loop shows the machine each cached cycle's responses (their
// cache bits, in the order the ranks performed them, which every rank saw
// alike because they come from the agreed bit vector). Once the same
// sequence of bits has made up Repeats rounds in a row, the machine locks:
// the last round's units (each cycle's bits, split where one call's
// requests end: a bucket of the optimizer) become the schedule's, and the
// loop no longer runs an agreement every cycle. It performs each unit as
// soon as its tensors are all queued on every rank, after one small header
// collective that carries the slot's fingerprint and how many units this
// rank has ready (the ranks fuse the fewest), so that a rank that is at
// another unit, or that has diverged (a request outside the schedule, a
// changed shape, a renamed or skipped tensor, a join, a shutdown), is
// detected on every rank at once. Then every rank leaves the schedule
// together and the loop goes back to negotiation, whose answers (Horovod's
// error texts, the stall inspector's reports) are the same as if the
// schedule had never been on; it learns again from there.
//
// A header is a bitwise AND of HeaderWords words per rank: the slot's
// fingerprint (of the whole schedule, so that ranks that split it
// otherwise never agree), its complement, status bits (this rank is ready;
// no rank is ready; this rank stays), a thermometer code of the units
// ready, and another of how many of those lie in one run of memory on
// this rank (RunOf: the least over the ranks, which the loop reduces in
// one call where they lie when it covers the units performed). A rank that has nothing ready joins a header only to wait
// (every heartbeat, so that a rank that is ready is never left alone in a
// collective for long) and says so; a ready rank that has waited longer
// than its patience, or a rank whose callers wait on a unit that cannot
// complete, votes to leave.
//
// No goroutines, no clock, no transport: the tests script N ranks in one
// goroutine, combining their headers by hand.
//
// Whether a rank joins a header, and with which vote, is Choose's decision
// from what the rank knows (Local); Clocks keep the rank's timers (its last
// header, how long a unit has been ready, how long a caller has waited)
// from the times the loop gives, and say when an idle rank looks again.
package schedule
