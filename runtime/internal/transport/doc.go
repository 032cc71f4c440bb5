// Package transport opens the communicator a Runtime runs over when the
// program gives it none, and tells the runtime its place in the job. It
// turns the environment into a comm.Communicator: mpirun, Hydra or an MPI
// srun (MPI's world, runtime/comm/mpicomm), gohorovodrun --gloo (the
// embedded transport, joined through gohorovod's rendezvous, elastic
// rounds included), srun without MPI, torchrun, a PyTorchJob or Volcano
// (internal/job/origin's placement: rank 0 hosts the rendezvous, or the
// workers meet in torch's TCPStore), or nothing at all (one rank in
// memory). Under MPI it can also move the host collectives onto the
// embedded transport's TCP ring beside MPI (OpenHostData,
// HOROVOD_CPU_OPERATIONS=gloo). WatchLauncher is the worker's side of the
// launcher guard: a worker that gohorovodrun started on this host exits
// when the launcher is gone.
//
// This is the one room of the runtime that knows the transports: the
// runtime package imports only the contract (runtime/comm), its
// configuration and this package. It does I/O: it reads the environment,
// listens, dials, and starts MPI.
//
// Open returns a Place: the communicator (whose Close closes all that Open
// opened for it), the transport's name for the log (MPI, Single,
// Embedded; Given for a communicator the program gave), and what the
// runtime needs of its place: the elastic round and its session (host
// updates, frozen ranks reported to the launcher), and whether MPI is to
// be finalized (FinalizeMPI) and which settings it was started with
// (Settings).
package transport
