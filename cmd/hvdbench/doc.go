// Command hvdbench measures the runtime's allreduce against the raw-MPI
// yardstick (cmd/hvdbench/yardstick/baseline.c: plain MPI_Allreduce of the
// same tensors, whole, one call per tensor, or fused) in one run.
//
// Started by hand (not under mpirun) it orchestrates: it builds the
// yardstick with mpicc into bin/, runs it (on the tensor sets the cases
// asked for are compared with) and then itself under
// scripts/mpirun.sh with the same settings, parses both sets of key=value
// lines and prints the ratios runtime/raw-MPI:
//
//	go build -tags mpi -o bin/hvdbench ./cmd/hvdbench && bin/hvdbench -np 2
//
// Under mpirun (the worker) it drives the runtime as training does — every
// tensor of a model submitted asynchronously, then waited for — over
// ResNet-50's gradients (and the same through the DistributedOptimizer,
// optimizer), one 64 MiB tensor, 1000 tensors of 4 KiB (and the
// same 1000 as views of one flat buffer, 4KiBx1000flat, whose fused
// response is reduced in place, whole; its yardstick is 4KiBx1000's one
// call over one packed buffer) and 161 tiny tensors (the steady-state cycle cost with the cache warm, and heap
// allocations per step), for each setting of the runtime's knobs asked for:
// -fusion (threshold), -chunk (transport chunk of tensors reduced in
// place), -fchunk (piece of a fused response copied, reduced and copied
// back at a time) and -maxfused (largest tensor fused); each takes a
// comma-separated list and the worker runs every combination. Times are the
// maximum over ranks of each step, median over steps, timed like the
// yardstick's (from a barrier to the end of the step); algbw = bytes/time,
// busbw = algbw·2(n−1)/n, as nccl-tests report them. us_per_cached_cycle is
// the median time inside the step's cycle when it ran from the response
// cache alone; whole_per_step counts the fused responses that lay in one
// run of memory on every rank and were reduced there whole
// (Stats.FusedWhole), static_units_per_step the units the static schedule
// performed without a cycle's agreement (Stats.StaticUnits); -cpuprofile
// writes rank 0's CPU profile. -rounds N repeats
// the yardstick-then-runtime pair N times, so that both see about the same
// machine load, and ends with summary lines: medians over the rounds of the
// runtime's and the best raw mode's times and of the per-round ratios.
//
// A flat case's ratio line carries two more yardsticks, which split its
// time between what the runtime adds and what it cannot avoid. The packed
// call again in C under the MPI settings every gohorovod process has
// (raw_runtime_settings_ms: the thread level mpi.Init asks for,
// MPI_THREAD_MULTIPLE, through OMPI_MPI_THREAD_LEVEL, and Open MPI
// yielding while it waits), and the same call made by the worker itself
// on the flat buffer before its runtime starts, with the inputs set and
// checked around every step as the runtime's are (direct_ms, its line
// impl=direct-mpi; beside MPI only). ratio_vs_direct is the runtime's own
// cost on top of one call.
//
// The optimizer case is the path training takes: ResNet-50's shapes as the
// parameters of an SGD with momentum 0.9 wrapped in optim.NewDistributed
// over optim.FromRuntime (its default: gradients reduced in buckets). Each
// timed step is ZeroGrad, each gradient written (copied in from a
// precomputed buffer) and reported Ready in reverse order, as backward
// finishes them, then Step (wait for the averages and update the
// parameters). The yardstick has no such case: the orchestrator prints its
// time beside the runtime's allreduce of the same gradients (resnet50),
// optimizer_over_allreduce.
//
// The result of every step (warm-up and timed) is checked, outside the
// timer: before each step the inputs are set to rank-dependent small
// integers (exact in float32), and after it every element of every tensor
// must equal the sum over ranks; in the optimizer case every averaged
// gradient must equal the average (exactly over a power of two ranks)
// after every step, and after the last the parameters must be equal on
// every rank. verified=N counts the elements compared with their expected
// value over all steps. On a mismatch the worker goes on stepping (the
// other ranks would wait on it) and then exits non-zero naming the case,
// the step, tensor, element, got and want.
package main
