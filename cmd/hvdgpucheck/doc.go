// Command hvdgpucheck verifies the runtime's GPU paths on a machine with a
// GPU: NCCL allreduce (single and fused), allgather, broadcast, alltoall
// and reducescatter at one rank, and the same collectives staged through
// pinned host memory at two ranks sharing one GPU over the in-memory
// communicator, checking every result, and times a fused allreduce of
// 8 x 2 Mi float32s (-elems) on each path: the median and best time and
// algorithm bandwidth (bytes reduced per second; the goal for the staged
// path at np 2 is in docs/BENCHMARKS.md), beside its yardstick: the
// same allreduce of host tensors through the same runtime and communicator,
// interleaved with it, and the ratio of the two medians (near 1 when the
// host collective, not the GPU's copies, bounds the staged path). Device-copy and fusion-copy
// bandwidth are measured by cuda/cmd/gpucheck. Build it here and copy the
// binary over (the GPU machine needs only the driver and the libraries):
//
//	CGO_ENABLED=0 go build -o hvdgpucheck ./cmd/hvdgpucheck
//	./hvdgpucheck -device 0
package main
