// Package data shards a dataset among the ranks of a data-parallel job.
//
// A Sampler gives each rank its share of the sample indices [0, n) for one
// epoch, in the manner of PyTorch's DistributedSampler: every rank draws the
// same permutation (from a seed and the epoch, so ranks agree without
// talking), pads it by wrapping around or drops the tail so that it divides
// evenly, and takes every size-th index starting at its rank. Every rank thus
// sees the same number of samples, and of batches, which a collective-based
// training loop needs to avoid waiting forever on a rank that ran out.
// Call SetEpoch at the start of each epoch to reshuffle.
package data
