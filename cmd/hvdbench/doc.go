// Command hvdbench measures the runtime's allreduce against the raw-MPI
// yardstick (../shared/bench/allreduce_baseline.c) in one run.
//
// Started by hand (not under mpirun) it orchestrates: it builds the
// yardstick with mpicc into bin/, runs it and then itself under
// scripts/mpirun.sh with the same settings, parses both sets of key=value
// lines and prints the ratios runtime/raw-MPI:
//
//	go build -tags mpi -o bin/hvdbench ./cmd/hvdbench && bin/hvdbench -np 2
//
// Under mpirun (the worker) it drives the runtime as training does — every
// tensor of a model submitted asynchronously, then waited for — over
// ResNet-50's gradients, one 64 MiB tensor, 1000 tensors of 4 KiB and 161
// tiny tensors (the steady-state cycle cost with the cache warm, and heap
// allocations per step), for each fusion threshold and chunk size asked
// for. Times are the maximum over ranks of each step, median over steps;
// algbw = bytes/time, busbw = algbw·2(n−1)/n, as nccl-tests report them.
package main
