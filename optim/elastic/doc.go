// Package elastic is elastic training (Horovod's hvd.elastic): a job that
// survives lost workers, grows when hosts appear and shrinks when they go,
// losing no more than the work since the last commit.
//
// A worker's program initialises the runtime, builds a State over the
// values that training changes, and hands its training function to Run:
//
//	hvd.Init()
//	sampler, _ := elastic.NewSampler(n, batch, seed, hvd.Rank(), hvd.Size())
//	objs, _ := elastic.NewObjects(map[string]any{"epoch": &epoch})
//	model, _ := elastic.NewOptimizer(dopt) // a DistributedOptimizer and its parameters
//	state, _ := elastic.NewState(nil, elastic.Named("epoch", objs),
//		elastic.Named("model", model), elastic.Named("sampler", elastic.NewSamplerHandler(sampler)))
//	state.RegisterResetCallback(func() error { sgd.SetLR(lr * float64(hvd.Size())); return nil })
//	err := elastic.Run(ctx, state, func(ctx context.Context) error {
//		for ; epoch < epochs; epoch++ {
//			for _, b := range sampler.Batches() { ...; dopt.Step(); sampler.Record(); state.Commit() }
//			sampler.SetEpoch(epoch + 1)
//		}
//		return nil
//	})
//
// and the job is started by gohorovodrun's elastic driver, which runs on
// the embedded transport (docs/EMBEDDED.md):
//
//	gohorovodrun -np 4 --min-np 2 --max-np 8 --host-discovery-script ./discover.sh ./train
//
// What happens:
//
//   - Run syncs the state from rank 0 and calls the training function.
//   - When a worker dies, the survivors' collectives fail; Run restores the
//     last commit, re-forms the group (the runtime's Restart joins the
//     launcher's next rendezvous round: new rank and size; the dead
//     worker's host is blacklisted), re-deals the Sampler over the new
//     size, rebinds the DistributedOptimizer, runs the reset callbacks,
//     syncs from the new rank 0 (an old worker) and calls the function
//     again.
//   - When the discovery script reports hosts added or removed, the
//     launcher tells rank 0; at the next Commit every rank learns it (a
//     small broadcast from rank 0) and Commit returns a
//     *HostsUpdatedError, which the function returns: Run re-forms the
//     group the same way, without restoring. New workers start in Run and
//     receive the state through its sync.
//   - A worker the new group has no place for gets ErrRemoved and exits.
//
// The pieces:
//
//   - State combines Handlers. Commit snapshots every handler in memory,
//     then checks for host updates; Restore goes back to the last snapshot;
//     Sync copies rank 0's values to every rank and snapshots them; Reset
//     runs the reset callbacks in order (Horovod's State, section 4.3 of
//     the reference).
//   - Objects handles any gob-encodable values (Horovod's ObjectState),
//     Optimizer handles an optim.Optimizer with its parameters (a
//     DistributedOptimizer is rebound to the re-formed runtime), and
//     SamplerHandler handles a Sampler.
//   - Sampler deals a seeded per-epoch permutation of a dataset over the
//     current size, records how many samples of the epoch the group has
//     processed, and after a resize or a Restore deals the remaining
//     samples over the new size: no committed sample is repeated and none
//     is skipped.
//   - FromRuntime adapts an *hvd.Runtime to the Broadcaster that Sync uses;
//     tests use any other implementation.
//   - Objects, Optimizer and SamplerHandler are also Codecs: they encode
//     their live values as bytes and decode them back, all or nothing.
//     Sync sends rank 0's encoding; State.Encode and State.Decode give the
//     whole state as named parts, which package optim/checkpoint writes to
//     disk and reads back, so that one description of the training state
//     serves commits, syncs and checkpoints. State.OnCommit runs a function
//     at each commit (a checkpoint of every k-th).
//
// Rules, as in Horovod: no collective may run between Init and Run (a
// worker that joins later would never call it; Run detects it and returns
// ErrCollectiveBeforeRun); every rank commits at the same steps; the
// training function returns the errors of the runtime and of Commit as
// they are. Elastic training needs the embedded transport: over MPI Run
// refuses (ErrNotElastic), since MPI cannot re-form a running job. Unlike
// Horovod, Run syncs after every reset, also when hosts were only removed:
// skipping it there is Horovod's deadlock #3494.
package elastic
