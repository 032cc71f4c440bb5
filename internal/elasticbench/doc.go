// Package elasticbench builds the workloads that measure the cost of an
// elastic commit (optim/elastic's State.Commit), shared by the Go
// benchmarks of optim/elastic and by cmd/elasticbench:
//
//   - MNIST: the state that examples/mnist commits — the MLP's parameters
//     and SGD momentum behind an elastic.Optimizer handler, an
//     elastic.Sampler's position and the epoch and batch ints behind an
//     elastic.Objects handler — and one training step of that MLP on a
//     batch of random data, single process, no runtime: the yardstick a
//     commit is measured against.
//   - Big: a state of a given size in bytes, half float32 parameters and
//     half their SGD momentum, behind an elastic.Optimizer handler, with a
//     plain copy of as many bytes as its yardstick.
package elasticbench
