// Package timeline writes a Chrome trace (the Trace Event JSON array that
// chrome://tracing and Perfetto open) of the runtime's work, in the layout
// Horovod's timeline uses: each tensor name is a "process" row; negotiation
// is a NEGOTIATE_<OP> span with one instant per rank that reported ready;
// processing is an <OP> span with nested activity spans (QUEUE,
// MEMCPY_IN_FUSION_BUFFER, MPI_ALLREDUCE, MEMCPY_OUT_FUSION_BUFFER, ...);
// CYCLE_START marks each background cycle when asked.
//
// Events are buffered by the caller's goroutine and written with Flush,
// once per cycle, by overwriting the closing bracket: the file is a complete
// JSON array after every Flush, so it can be opened while the job runs or
// after it dies.
package timeline
