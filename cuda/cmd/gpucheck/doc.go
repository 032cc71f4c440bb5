// Command gpucheck verifies CUDA and NCCL support on a machine with a GPU in
// one run: it loads the libraries (as GOHOROVOD_CUDART_PATH,
// GOHOROVOD_NCCL_PATH, LD_LIBRARY_PATH and the usual paths say), checks the
// device contract, prints device-copy bandwidth against a fusion copy of
// ResNet-50's 161 tensors in and out (batched as the runtime does it; where
// the runtime has cudaMemcpyBatchAsync, also its fallback, the copies
// spread over 1, 2, 4 and 8 streams; and with a copy call per tensor, each
// with its ratio to the plain copy: the goal is 0.6x or more) and
// host-device bandwidth from pageable and pinned memory, and runs NCCL
// collectives at one rank. It exits 1 if any step fails. cmd/hvdgpucheck
// prints the staged allreduce's algorithm bandwidth.
//
// Build it on a machine with Go and copy the binary over (the GPU machine
// needs no Go, CUDA toolkit or MPI, only the driver and the libraries,
// e.g. from the nvidia-cuda-runtime-cu12 and nvidia-nccl-cu12 wheels):
//
//	CGO_ENABLED=0 go build -o gpucheck ./cuda/cmd/gpucheck
//	./gpucheck -device 0 -iters 20
package main
