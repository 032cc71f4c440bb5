// Command rankbench measures what each rank of a job costs as the job
// grows to hundreds of ranks on one machine (oversubscribed), so that
// anything in the runtime that grows with the square of the job shows: it
// runs examples/synthetic with a tiny model (tiny40: 40 tensors of 256
// floats, no compute) at each np of a ladder (-np, default
// 8,16,32,64,128,256), under each transport (-transports):
//
//	gloo        gohorovodrun --gloo -np N: the embedded transport
//	mpi         scripts/mpirun.sh N: Open MPI's mpirun
//	hvdrun-mpi  gohorovodrun -np N: mpirun as our launcher starts it
//	emu         gohorovodrun --gloo --nnodes, one launcher per node of an
//	            emulated cluster of -emu-nodes nodes (internal/emucluster;
//	            root only), np/nodes ranks each
//
// Each job's rank 0 prints every rank's start-up times
// (synthetic -rank-report), and after its timed steps the ranks hold,
// stepping, while rankbench reads every rank's /proc entry (synthetic
// -hold-file). For each transport it prints two tables.
//
// Start-up (milliseconds) and steps: spawn is the launch to the first
// rank's start (its main), ranks up the first rank's start to the last's,
// init the last rank's start to the last return of hvd.Init (the
// rendezvous, the transport's connections and the runtime's set-up, which
// cannot be told apart from outside the runtime), init max the slowest
// rank's hvd.Init, first step the last Init's return to the last rank's
// first step, teardown the end of the hold to the launchers' exit (the
// last report and hvd.Shutdown). step ms is a cached step's median, probe
// ms and miss ms a step with one more small allreduce under a name used
// before and under a fresh name (a negotiation miss; synthetic
// -miss-steps); allreduce ms the yardstick, raw MPI_Allreduce of the
// step's 40 KiB in one buffer at the same np (cmd/hvdbench/yardstick,
// mode whole, under scripts/mpirun.sh), and step/allreduce their ratio.
// CPU ms/step/rank is the ranks' CPU time over the timed steps divided by
// steps and ranks, which oversubscription distorts less than wall time,
// and CPU vs first its ratio to the ladder's first np.
//
// Per rank in steady state, read from /proc in the hold, the largest over
// the ranks unless said: resident memory (VmRSS, median and largest), open
// file descriptors and how many are sockets, threads, goroutines
// (synthetic's runtime.NumGoroutine), RssShmem; then for the whole job the
// shared memory it maps (distinct files in /dev/shm and memfds, unlinked
// ones included, each counted once), the launchers' CPU time and peak
// resident memory (every process of the job that is not a rank, sampled
// every 100 ms: VmHWM, utime+stime), the job's CPU time (the launchers'
// rusage, which counts the ranks they waited for), and how many files the
// job left in /dev/shm or the temporary directory (each listed below the
// table; -strict makes rankbench exit non-zero for them).
//
// A job is killed when the machine's available memory falls below
// -min-avail, so that a change that makes memory grow with the square of
// the job (as the embedded transport's full mesh of shared-memory files
// once did) ends the run instead of the machine. Run it from the
// repository's root:
//
//	go build -tags mpi -o bin/ ./cmd/... ./examples/...
//	bin/rankbench -np 8,16,32,64 -transports gloo,mpi
//	bin/rankbench -np 128 -transports mpi -strict
//	bin/rankbench -np 64,128 -transports emu -emu-nodes 8    # as root
//
// Arguments after "--" go to synthetic after rankbench's own (the model,
// the steps), so they override them; the yardstick reduces tiny40's bytes
// whatever the model.
package main
