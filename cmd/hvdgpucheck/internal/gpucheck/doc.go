// Package gpucheck verifies the runtime's GPU paths on a machine with a
// GPU: NCCL allreduce (fused and single), allgather and broadcast at one
// rank, and every collective staged through pinned host memory at two
// ranks sharing one GPU over the in-memory communicator, with the results
// checked and timed. The hvdgpucheck command runs it; its test runs it
// against the mock libraries of internal/cudamock.
package gpucheck
