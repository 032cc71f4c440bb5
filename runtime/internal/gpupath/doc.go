// Package gpupath decides how the runtime moves one collective on GPU
// tensors: through NCCL, through a CUDA-aware MPI that takes device
// pointers, or staged through a pinned host buffer around the host
// communicator. The decision is a pure function of what the job has agreed
// is available and of the operation, so that it can be tested without a
// GPU, and so that every rank, given the same inputs, takes the same path.
package gpupath
