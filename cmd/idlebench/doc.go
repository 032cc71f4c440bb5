// Command idlebench measures what the runtime takes from computation while
// the ranks compute: the CPU time of each rank's process per second of
// wall time over steps that are one allreduce of a small tensor under a
// fixed name, separated by a pause in which the program does nothing (a
// stand-in for compute that leaves the core to the runtime alone, so that
// the machine's other load barely moves the figure). It runs, in every
// round and in a rotated order, the runtime with the static schedule off
// (GOHOROVOD_STATIC_SCHEDULE=0: an agreement allreduce every cycle), the
// runtime with it on, and the yardstick: the same allreduces made directly
// with MPI_Allreduce, which is the least any runtime can spend. Rank 0
// prints one line per variant, the medians over the rounds of the ranks'
// mean CPU share, and the ratio of each to the yardstick's:
//
//	go build -tags mpi -o bin/ ./cmd/idlebench
//	scripts/mpirun.sh 2 bin/idlebench -rounds 5 -steps 50 -pause 20ms
//
// Run it under mpirun (or gohorovodrun) with a build that has MPI.
package main
