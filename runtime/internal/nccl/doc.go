// Package nccl is the runtime's view of an NCCL communicator: the Backend
// that makes communicators (rank 0 draws the unique id, the runtime
// broadcasts it over the host communicator, every rank joins) and the Comm
// whose collectives the GPU path queues on the device's stream.
//
// FromCUDA adapts the cuda package's NCCL, loaded at run time, to these
// interfaces. NewFake makes an NCCL for tests on machines without a GPU:
// its communicators run over an in-memory host group and read and write
// the host memory behind cuda.Fake devices, in stream order.
package nccl
