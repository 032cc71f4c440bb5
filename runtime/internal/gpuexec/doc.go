// Package gpuexec is the runtime's GPU executor: it performs the
// negotiated responses whose tensors live in GPU memory, along the path
// the ranks agree on (runtime/internal/gpupath): NCCL on the device's
// stream, a CUDA-aware host communicator handed device pointers, or host
// staging through pinned buffers. It owns a rank's GPU resources for one
// process set: the device (injected, or opened at the first GPU tensor),
// the NCCL communicator, the device fusion buffer and the staging buffers.
//
// The runtime's loop drives it: it takes a response's entries from its
// queue, opens their timeline spans, calls Executor.Perform with a Host
// (its communicator, its chunked host reduction, its timeline) and
// completes the handles. Only the loop's goroutine calls Perform; Device
// may be called from any goroutine (at enqueue time).
package gpuexec
