// Command synthetic is a synthetic-model benchmark in the manner of
// Horovod's pytorch_synthetic_benchmark: it trains a model that exists only
// as a list of parameter shapes, with the DistributedOptimizer, and measures
// how fast steps go and how much of the gradient communication hides behind
// the backward pass.
//
// Usage:
//
//	synthetic [--model resnet50|vgg16|tiny40 | --shapes FILE] [--compute-ms 100] [--warmup 3]
//	          [--batches-per-iter 5] [--iterations 5] [--part-steps 10] [--batch-size 32]
//
//	scripts/mpirun.sh 2 bin/synthetic        # 2 ranks (binary built with -tags mpi)
//	go run ./examples/synthetic              # one process
//
// A step is a backward pass and an optimizer step. Backward visits the
// parameters in reverse file order; for each it does real arithmetic over
// the gradient, in an amount proportional to the parameter's size (sweeps
// calibrated at start so that the whole backward takes -compute-ms on this
// machine with every rank computing), then hands the gradient to the
// DistributedOptimizer, which starts its allreduce at once. The optimizer
// step (plain SGD) waits for the reductions and updates the parameters.
//
// After warm-up steps, the benchmark times -iterations of -batches-per-iter
// steps, then -part-steps steps of each part of a step alone: backward
// compute with no communication, communication with no compute (every
// gradient handed over at once, then waited for), and the parameter update.
// Rank 0 prints key=value lines: steps per second per rank
// (rank.N.steps_per_s) and in total (steps_per_s_total, with samples per
// second at -batch-size samples a step), the CPU time of the timed steps per
// sample, every rank's process summed (cpu_ms_per_sample: getrusage over the
// timed steps in each rank), the median step time and the median
// times of the parts (step_ms, compute_ms, comm_ms, update_ms), and the
// overlap achieved:
//
//	hidden_ms = compute_ms + comm_ms + update_ms - step_ms
//	overlap   = hidden_ms / min(compute_ms, comm_ms)
//
// the share of the overlap that was possible (1 when communication hides
// entirely behind compute or the other way round, 0 when nothing overlaps,
// negative when a step is slower than its parts one after the other; 0
// with -compute-ms 0). reduced_in_backward is the mean share of gradients
// whose allreduce had completed when the last layer's compute ended, and
// first_reduced_early the share of steps in which the first gradient's had.
//
// Overlap needs a spare core: the runtime's background goroutine and MPI
// copy and reduce on the CPU, and every cycle in which gradients are ready
// is a rendezvous of the ranks' loops. With as many busy ranks as cores,
// communication during backward takes CPU from the compute, and a step can
// be slower than its parts in sequence; a longer HOROVOD_CYCLE_TIME means
// fewer rendezvous.
//
// -bytegrad sends the gradients through optim's ByteGrad hook (8 bits a
// value: each bucket's chunks go to their owners with an alltoall, are
// averaged, and come back with an allgather) instead of allreduce;
// allreduced_mib_per_step is then 0 and sent_mib_per_step, rank 0's bytes
// per timed step by the runtime's own count (hvd.Stats.SentBytes, every
// collective as its bandwidth-optimal algorithm sends it), about a quarter
// of an allreduce's. Compare the two on a link slower than the cores (an
// emulated cluster): on one machine the quantization's CPU costs more than
// the bytes it saves.
//
// For cmd/rankbench, which measures what each rank costs at many ranks,
// -rank-report has rank 0 print, for every rank R, rank.R.pid,
// rank.R.main_unix_us (when the program started), rank.R.init_start_unix_us
// and rank.R.init_end_unix_us (around hvd.Init), rank.R.first_step_unix_us
// (the first training step done), rank.R.goroutines
// (runtime.NumGoroutine at the end) and rank.R.cpu_ms_timed, and
// cpu_ms_per_step_per_rank over the timed steps. -miss-steps N times N
// steps that end with a small allreduce under a name used before and N
// under a fresh name each, a negotiation miss (probe_cached_step_ms,
// probe_miss_step_ms, medians averaged over ranks). -hold-file PATH keeps
// the ranks stepping after the timed steps, from rank 0's "hold=begin"
// line until PATH exists, so that an observer can sample them.
//
//	gohorovodrun --gloo -np 32 bin/synthetic --model tiny40 --compute-ms 0 \
//	    --part-steps 0 --rank-report --miss-steps 5
//
// Configuration of the runtime (fusion threshold, cycle time, ...) comes
// from the HOROVOD_* environment variables.
package main
