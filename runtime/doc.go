// Package runtime is gohorovod's public API: Horovod's init, rank and size
// queries and collectives (allreduce, grouped allreduce, allgather, grouped
// allgather, broadcast, alltoall, reducescatter, grouped reducescatter,
// barrier, join) for Go programs, and a point-to-point Exchange (each rank
// sends to one rank and receives from one, negotiated like any collective;
// Horovod has none) for the decentralized algorithms. Horovod's sparse_allreduce (an allgather
// of a sparse gradient's values and indices) is not provided: allgather the
// two tensors, or use GroupedAllgather. Import it as hvd:
//
//	import hvd "github.com/gohorovod/gohorovod/runtime"
//
//	if err := hvd.Init(); err != nil { ... }
//	defer hvd.Shutdown()
//	h, err := hvd.AllreduceAsync(grad, "layer1.weight", hvd.Average)
//	...
//	err = h.Wait(ctx)
//
// One background goroutine per Runtime owns the communicator. Callers only
// enqueue named requests and get a Handle back. Once per cycle
// (HOROVOD_CYCLE_TIME, 1 ms by default) the loop negotiates with the other
// ranks which names every rank has submitted: rank 0 gathers the requests,
// validates that the ranks agree (Horovod's error texts) and broadcasts the
// ordered list of operations; in steady state a response cache lets the
// ranks agree with one bitwise-AND allreduce instead. Ready allreduces are
// fused into a persistent buffer up to HOROVOD_FUSION_THRESHOLD bytes,
// reduced with one collective and copied back; then the handles complete.
// Pieces of a fused response that already lie in one run of memory (tensors
// that are views of one flat buffer, tensor.NewFlat) are reduced where they
// lie, with no copy.
//
// Tensors may be of Horovod's element types (uint8, int8, uint16, int16,
// int32, int64, float16, float32, float64, bool) and bfloat16. Every type
// can be broadcast, allgathered and alltoall'd; reductions on bool are
// logical (Sum and Max are "or", Min and Product "and"; Average is refused),
// and Adasum takes the four float types (float16 and bfloat16 computed in
// float32). On GPUs, NCCL has no int16 or uint16: those go through
// CUDA-aware MPI or host staging.
//
// Grouped allgather and reducescatter first agree on the group's size (a
// one-integer allgather), so that ranks passing different numbers of
// tensors get an error rather than a hang; each member is then its own
// collective (only allreduces are fused): see GroupedAllgatherAsync.
//
// A model's gradients, reduced step after step, are best held in an
// AllreduceGroup (NewAllreduceGroup): its requests are built once and its
// names held for its life, so a step costs no allocation that grows with
// the number of tensors and no lookup of a name.
//
// Every call exists as a method on a Runtime; the package-level functions
// use one default instance (see Default and SetDefault). Several Runtimes
// can run in one process, each over its own communicator: this is how the
// tests run N ranks as goroutines over memcomm.NewGroup.
//
// Process sets (ProcessSet) run collectives among a subset of the ranks,
// each with its own queue, negotiation, response cache and join state: static
// sets given to Init (WithProcessSets, NewProcessSet, ProcessSetFromComm),
// dynamic ones added and removed after it (WithDynamicProcessSets,
// AddProcessSet, RemoveProcessSet). A call takes its set with the
// InProcessSet option. With HOROVOD_HIERARCHICAL_ALLREDUCE or
// _ALLGATHER, host collectives go through the node first and across nodes
// second, in every set that spans several nodes.
//
// With HOROVOD_TIMELINE set, rank 0 writes a timeline: a Chrome trace with a
// row per tensor name showing its negotiation and each phase of its
// operations. StartTimeline and StopTimeline switch it to another file, or
// stop it, while the job runs (HOROVOD_TIMELINE=DYNAMIC starts with none).
//
// Configuration comes from the HOROVOD_* environment variables, read once by
// Init through runtime/config (or given with WithConfig). Logging goes
// through zerolog with a rank field, at HOROVOD_LOG_LEVEL; the default
// logger stamps lines in RFC 3339 with milliseconds. Debug shows the
// loop's decisions (negotiation results, fusion plans, cache evictions and
// invalidations, GPU paths), trace adds each cycle's agreement and every
// operation performed. Init logs a
// warning, on each rank, for every knob that is set but not implemented yet
// (HOROVOD_MPI_THREADS_DISABLE, the placement variables), and
// fails on every rank when the ranks were started with different values of
// a knob that must agree (the fusion threshold, cycle time, cache capacity,
// the hierarchical, dynamic process set and autotune knobs, and the
// chunking options),
// naming the knob and each rank's value.
package runtime
