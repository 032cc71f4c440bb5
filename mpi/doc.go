// Package mpi is gohorovod's binding to the Message Passing Interface: the
// world communicator, local (shared-memory) and split communicators, and the
// collectives the runtime needs (allreduce in place, allgatherv, gatherv,
// bcast, alltoallv, reduce-scatter, barrier) on tensor buffers of every
// tensor.DType, with every MPI return code turned into a Go error.
//
// # Building
//
// The real binding needs cgo and an MPI library and sits behind the "mpi"
// build tag:
//
//	make deps                # installs Open MPI (apt-get) when mpicc is missing
//	go build -tags mpi ./... # links Open MPI through pkg-config (ompi-c)
//
// To link MPICH instead, add the "mpich" tag. Our own cgo layer then finds
// MPICH through pkg-config (mpich); github.com/sbromberger/gompi, which hard
// codes Debian's Open MPI paths, needs the flags from the environment:
//
//	CGO_CFLAGS=-I/usr/include/x86_64-linux-gnu/mpich \
//	CGO_LDFLAGS="-Wl,--as-needed -lmpich" go build -tags mpi,mpich ./...
//
// Without the tag the package has the same API, and every call returns an
// error wrapping ErrNotBuiltIn that says how to rebuild. Such a binary,
// started by mpirun, Hydra or srun with more than one rank, refuses to start
// (Init returns an error naming OMPI_COMM_WORLD_SIZE, PMI_SIZE or
// SLURM_STEP_NUM_TASKS; see DetectLaunch) instead of running as N separate
// "rank 0 of 1" processes (started without a launcher, gohorovod's runtime
// does not call Init and runs the process as one rank). A binary built with
// MPI refuses in the
// same way when its MPI reports one rank while the launcher's variables say
// more (linked against one MPI, started by the other's mpirun).
//
// # Errors and agreement
//
// Init asks MPI for MPI_THREAD_MULTIPLE (the runtime calls MPI from its own
// goroutine, on whatever OS thread Go chooses) and, when MPI provides less,
// returns an error that says how to get it instead of ending the process.
// It sets MPI_ERRORS_RETURN on every communicator, so no call aborts the
// process: failures become *Error values carrying MPI_Error_string.
// Collectives need arguments that agree across ranks (element counts,
// dtypes, roots, counts vectors), by the rules of internal/agree, which
// every transport of the project shares. By default every collective first
// checks that agreement with one small collective (an allreduce of a few
// integers; for Alltoallv an alltoall of the send counts as well), so that
// every rank returns the same *MismatchError or *ArgError and the
// communicator stays usable; only when the ranks disagree do they gather
// each other's arguments, so that the *MismatchError says how in
// internal/agree's words, as the other transports do. A rank's own
// mistakes (a buffer too small for its counts, a root out of range) are
// found by internal/agree's per-rank check too, and reach every rank as
// that rank's *ArgError. Callers that already guarantee agreement (the runtime after
// negotiation) turn the check off with Comm.SetCheck(false); a mismatch is
// then undefined behaviour of the MPI library.
//
// Counts beyond 2^31-1 elements are split into chunks by Allreduce and Bcast
// and refused by the v-collectives (whose counts and displacements are C
// ints).
//
// float16 and bfloat16 reduce through user-defined MPI operations that
// combine in float32 and round to nearest even, like tensor.Reduce (min and
// max propagate NaN and order -0 below +0, as Go's builtins do). For the
// other float types, min and max are MPI_MIN and MPI_MAX, whose NaN and
// signed-zero behaviour is the MPI library's.
// Integer types support BitAnd and BitOr (the runtime uses them on uint64 bit
// vectors).
//
// # Waiting in MPI under Go's scheduler
//
// A blocking collective is one long cgo call. Go's sysmon takes the P from
// a goroutine that has run on one scheduling tick for 10 ms, and one that
// only calls C never starts a new tick: from then on every call longer
// than a sysmon tick would lose its P and win it back on return, waking
// threads that compete with the ranks for the cores. So every collective
// first passes through Go's scheduler (runtime.Gosched) when the last such
// pass was more than a millisecond ago. AllreducePatient waits by testing
// the nonblocking collective, without pause for DefaultSpin and then
// sleeping, with the sleeping thread's timer slack set to 1 µs so that a
// sleep of 10 µs is not stretched to Linux's default 50 µs. After
// EnableDoorbell, a patient wait whose peers on the same node have not all
// posted the collective sleeps on the node's doorbell instead (a futex in
// memory the node's ranks share, rung by each rank as it posts), so that
// it is woken by the last local arrival rather than by a timer.
package mpi
