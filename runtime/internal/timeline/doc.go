// Package timeline writes a Chrome trace (the Trace Event JSON array that
// chrome://tracing and Perfetto open) of the runtime's work, in the layout
// Horovod's timeline uses: each tensor name is a "process" row; negotiation
// is a NEGOTIATE_<OP> span with one instant per rank that reported ready;
// processing is an <OP> span with nested activity spans
// (MEMCPY_IN_FUSION_BUFFER, MPI_ALLREDUCE, MEMCPY_OUT_FUSION_BUFFER, and on
// GPUs INIT_NCCL, NCCL_ALLREDUCE, MEMCPY_IN_HOST_BUFFER, SCALE_ON_HOST, ...:
// acts.go);
// CYCLE_START marks each background cycle when asked.
//
// On every row the events are in time order and properly nested: each E
// closes the row's innermost open B. A name's operation therefore follows
// its negotiation on its row; an operation answered from the response
// cache, which has no negotiation, is preceded by a QUEUE span from its
// submission on this rank to its start. The writer keeps the order with a
// stack of open spans per row and ends the spans still open when it is
// closed (for example by Runtime.StopTimeline in the middle of a
// negotiation).
//
// Events are buffered by the caller's goroutine and written with Flush,
// once per cycle, by overwriting the closing bracket: the file is a complete
// JSON array after every Flush, so it can be opened while the job runs or
// after it dies.
//
// Read and Validate check a trace file: valid JSON, well-formed metadata,
// per-row time order and nesting. The tests run them on the files the
// runtime produces.
package timeline
