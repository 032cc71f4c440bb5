// Package scaling holds the pure parts of cmd/scalebench: reading a
// training run's throughput from its output, the efficiency of a
// data-parallel run against the bound of as many independent single-rank
// jobs, and the plot of samples/s against the number of ranks.
package scaling
