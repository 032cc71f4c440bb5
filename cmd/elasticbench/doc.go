// Command elasticbench measures the cost of an elastic commit
// (optim/elastic's State.Commit) against yardsticks measured in the same
// run, and prints them side by side:
//
//   - the commit of examples/mnist's state (the MLP's parameters and SGD
//     momentum, the sampler's position, the epoch and the batch) against
//     --every (10) training steps of that MLP on a batch of random data, as
//     a percentage beside the goal (a commit every 10 steps costs under 5%
//     of the step time);
//   - the commit of a --state-mib (100) MiB state — half float32 parameters
//     in --tensors tensors, half their SGD momentum — against a plain copy
//     of as many bytes, in GB/s (10⁹ bytes/s) and as a ratio.
//
// Single process, no runtime. Each of --runs runs times --steps steps,
// --commits MNIST commits, then --reps alternating big commits and copies,
// so that every quantity sees about the same machine load; the table shows
// the medians over the runs, and the ratios are the medians of the per-run
// ratios. A run before them warms up and is not counted.
//
// A commit allocates a fresh copy of the optimizer's state (optim's State()
// returns a deep copy; the parameter values are copied into the snapshot's
// own buffers), so its cost depends on how often the garbage collector
// runs. Here the heap holds the big state, its gradients and snapshot and
// the copy's two buffers (about 4.5×--state-mib MiB), as
// examples/mnist's holds the dataset (about 220 MB), and collections are
// rare; in optim/elastic's BenchmarkCommitMNIST, whose heap holds little
// else, they come every few commits and the commit costs several times
// as much (docs/BENCHMARKS.md).
//
//	go run ./cmd/elasticbench
//	go run ./cmd/elasticbench --runs 21 --state-mib 400
//
// The Go benchmarks of the same workloads are in optim/elastic
// (go test -run '^$' -bench . ./optim/elastic/).
package main
