// Package cuda loads the CUDA runtime and NCCL at run time and gives Go
// access to device memory, copies, streams, events and NCCL collectives,
// so that one binary runs on machines with and without GPUs and builds
// without a CUDA toolkit.
//
// # Loading
//
// The libraries are opened with dlopen and called through the function
// pointers dlsym returns, with github.com/ebitengine/purego: no cgo, so a
// CGO_ENABLED=0 binary uses GPUs where they are present and reports them
// absent where not, and no C compiler, CUDA header or library is needed to
// build. Such a binary is dynamically linked to the C library (whose
// dlopen it calls), as a cgo one is; the nogpu build tag leaves GPU
// support out for a fully static CGO_ENABLED=0 binary. The package declares the few C types it needs itself (handles are
// uintptr, enums are int, ncclUniqueId is 128 bytes, passed by value as the
// platform's C ABI says). Load (the
// CUDA runtime) and LoadNCCL look for, in order:
//
//   - only what GOHOROVOD_CUDART_PATH (GOHOROVOD_NCCL_PATH for NCCL) names,
//     when it is set: a library file, a soname, or a directory;
//   - otherwise the sonames libcudart.so, libcudart.so.13, .12, .11.0, ...
//     (libnccl.so.2, libnccl.so) given bare to dlopen, which searches
//     LD_LIBRARY_PATH, the executable's run path and the ld.so cache;
//   - then those names in $CUDA_HOME, $CUDA_PATH and $CUDA_ROOT (lib64,
//     lib), /usr/local/cuda/lib64, the distribution's library directories,
//     $CONDA_PREFIX/lib and the nvidia/cuda_runtime/lib and nvidia/nccl/lib
//     directories of the Python site-packages it finds, where NVIDIA's pip
//     wheels (nvidia-cuda-runtime-cu12, nvidia-nccl-cu12) install them.
//
// A library that opens but lacks an entry point the package uses is
// skipped (when searching) or refused (when named by the override), with
// the symbol named. When nothing works, the *LoadError lists every path
// tried with dlerror's message, and the directories that held no candidate.
// Every such failure, and a binary without GPU support (another platform
// than linux/amd64 and linux/arm64, or built with the nogpu tag:
// ErrNoDlopen), matches ErrUnavailable; Describe prints what was found or why not, for
// `gohorovodrun --check-build`.
//
// # Devices and threads
//
// CUDA's current device is a property of the host thread, and goroutines
// move between threads, so every call that concerns a device takes its
// ordinal, and the package makes it current and makes the call on one
// host thread (runtime.LockOSThread around the pair).
// Likewise NCCL keeps group state per thread: NCCL.Group locks the
// goroutine to its thread between ncclGroupStart and ncclGroupEnd.
//
// # NCCL communicators
//
// A communicator of n ranks is made by calling NCCL.UniqueID on rank 0,
// sending the 128 bytes to every other rank over the host communicator
// (MPI or the in-memory group; this package does not do it), and calling
// NCCL.NewComm(device, n, rank, id) on every rank. Collectives map tensor
// dtypes to NCCL's (NCCLType: every dtype but int16 and uint16, which NCCL
// lacks; bool as uint8; bfloat16 from NCCL 2.10) and
// sum, product, min and max to NCCL's operations (NCCLOp: NCCL has no
// bitwise reductions).
//
// # The Device interface
//
// Device is what the runtime's staging and fusion paths use: allocate,
// free, copy host to device, device to host and device to device, set
// memory, synchronise. GPU implements it over a CUDA stream; Fake
// implements it over host memory, for tests on machines without a GPU.
package cuda
