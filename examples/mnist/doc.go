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
// The DistributedOptimizer holds the gradients in one flat buffer, in
// backward order, and reduces them in buckets of up to --bucket-bytes
// (64 KiB by default: here four buckets, fc3 with fc2's bias, fc2's
// weights, fc1's bias, fc1's weights), each a held reduce group started
// as soon as backward has produced its last gradient, so communication
// overlaps the rest of backward; Step waits for what is still in flight.
// --groups N reduces the parameters in N groups instead, each started when
// all its members are ready; --groups 1 gives up the overlap. The last
// epoch prints lr 0: the rate decays along a cosine to zero by the end of
// training.
//
// Unless GOMAXPROCS is set in the environment, each rank uses its share of
// the machine's cores (the cores divided by the ranks on this host, at least
// one), so that ranks do not oversubscribe the cores with BLAS goroutines.
package main
