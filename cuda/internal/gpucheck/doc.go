// Package gpucheck verifies a cuda.Device and NCCL on whatever machine it
// runs on: the Device contract (allocation, copies in every direction,
// memset, stream ordering, pinned memory, error cases), the bandwidth of a
// plain device-to-device copy against a fusion copy (many tensors packed
// into one buffer and unpacked again), host-device bandwidth from pageable
// and pinned memory, and NCCL collectives at one rank for every dtype. The
// gpucheck command runs it against a real GPU; the cuda package's tests run
// it against the fake device and against mock libraries.
package gpucheck
