package mpi

import "fmt"

// MPI's thread-support levels, in the order the standard defines them
// (MPI_THREAD_SINGLE < MPI_THREAD_FUNNELED < MPI_THREAD_SERIALIZED <
// MPI_THREAD_MULTIPLE). Open MPI and MPICH give them the values 0 to 3; a
// multi-process test checks these against the linked library's.
const (
	threadSingle = iota
	threadFunneled
	threadSerialized
	threadMultiple
)

// threadLevelName returns the MPI name of a thread-support level.
func threadLevelName(level int) string {
	switch level {
	case threadSingle:
		return "MPI_THREAD_SINGLE"
	case threadFunneled:
		return "MPI_THREAD_FUNNELED"
	case threadSerialized:
		return "MPI_THREAD_SERIALIZED"
	case threadMultiple:
		return "MPI_THREAD_MULTIPLE"
	}
	return fmt.Sprintf("unknown thread level %d", level)
}

// checkThreadLevel decides whether gohorovod can run on an MPI that provides
// the thread-support level provided. ours says whether Init itself
// initialised MPI (and will finalise it again on refusal) or found it
// initialised by someone else in the process.
//
// gohorovod needs MPI_THREAD_MULTIPLE: the runtime's goroutine calls MPI
// while the application may call it too, and Go runs goroutines, and so cgo
// calls, on whichever OS thread it likes, so not even MPI_THREAD_FUNNELED's
// "only the thread that initialised MPI" can be promised.
func checkThreadLevel(provided int, ours bool) error {
	if provided == threadMultiple {
		return nil
	}
	if !ours {
		return fmt.Errorf("mpi: MPI was initialised elsewhere in this process with thread level %s, "+
			"not MPI_THREAD_MULTIPLE, which gohorovod needs (Go calls MPI from whichever OS thread runs the goroutine): "+
			"initialise it with MPI_Init_thread and MPI_THREAD_MULTIPLE, or leave the initialisation to gohorovod",
			threadLevelName(provided))
	}
	return fmt.Errorf("mpi: MPI provides thread level %s, not MPI_THREAD_MULTIPLE, which gohorovod needs "+
		"(Go calls MPI from whichever OS thread runs the goroutine); MPI has been finalised again. "+
		"Use an MPI library built with thread support (Open MPI from 3.0 on and MPICH have it by default; "+
		"older Open MPI needs configure --enable-mpi-thread-multiple, MPICH --enable-threads=multiple) "+
		"and check that no MPI setting in the environment lowers it; gohorovod has no single-threaded MPI mode "+
		"(HOROVOD_MPI_THREADS_DISABLE does not lower this requirement)",
		threadLevelName(provided))
}
