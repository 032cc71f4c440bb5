// Package cudamock provides the test stand-ins for libcudart and libnccl
// (testdata/mockcudart.c and mocknccl.c) to the tests of every package:
// Libraries returns the two shared libraries, in a test's temporary
// directory under their real sonames, for one of the CUDA runtime's
// variants (CUDA 12.4: no cudaMemcpyBatchAsync; 12.8: the batch call with
// failIdx; 13.0: without). The "device memory" of the mock is host memory;
// it checks, per call, that the caller made the right device current on
// the calling thread, counts the copies and batches (Counts) and can fail
// a chosen copy (FailCopy).
//
// The libraries are compiled from the embedded sources with gcc when
// there is one on PATH. Without a C compiler, the prebuilt copies in
// testdata/prebuilt/GOOS_GOARCH are used (linux_amd64 is committed), so
// the tests that load them through purego still run; elsewhere they skip.
// The prebuilt copies carry the SHA-256 of the sources they were built
// from (mockSource), and TestPrebuiltIsCurrent fails when a source changed
// without `go generate ./internal/cudamock` rebuilding them.
// GOHOROVOD_CUDAMOCK=prebuilt makes Libraries use the prebuilt copies even
// where gcc is present (to run the no-compiler path on a machine that has
// one).
package cudamock

//go:generate go run gen.go
