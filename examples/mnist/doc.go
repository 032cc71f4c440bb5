// Command mnist trains a multi-layer perceptron on the MNIST digits, on one
// process or data-parallel on many.
//
// Usage:
//
//	go run ./examples/mnist [--epochs 3] [--batch 64] [--lr 0.05] ...
//	go build -tags mpi -o bin/ ./examples/mnist && gohorovodrun -np 2 bin/mnist
//
// Each epoch, rank 0 prints the mean training loss, the test accuracy and
// the training throughput in samples per second over all ranks.
//
// Each gradient's allreduce starts as soon as backward produces it (--groups
// 0, the default), so communication overlaps the rest of backward; Step
// waits for what is still in flight (waiting wakes the runtime's loop at
// once). --groups N reduces the parameters in N groups instead, each
// started when all its members are ready. Measured on 2 cores at np 2
// (epochs 2-3, three alternating rounds): 47-51k samples/s with --groups 0
// against 35-39k with --groups 1, which gives up the overlap.
//
// Unless GOMAXPROCS is set in the environment, each rank uses its share of
// the machine's cores (the cores divided by the ranks on this host, at least
// one), so that ranks do not oversubscribe the cores with BLAS goroutines.
package main
