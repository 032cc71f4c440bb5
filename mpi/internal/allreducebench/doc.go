// Command allreducebench times float32 sum allreduces through the mpi
// binding, with and without the agreement check, the way the raw-MPI
// yardstick cmd/hvdbench/yardstick/baseline.c does (barrier, time one call, max
// over ranks per iteration, median over iterations), so that the two can be
// run side by side and compared as a ratio:
//
//	go build -tags mpi -o bin/allreducebench ./mpi/internal/allreducebench
//	scripts/mpirun.sh 2 bin/allreducebench -bytes 4,67108864
//	scripts/mpirun.sh 2 ./allreduce_baseline --bytes 4 --modes whole --iters 2000
//
// Output, rank 0 only, one line per size and mode, key=value pairs in the
// yardstick's format plus check=on|off.
package main
