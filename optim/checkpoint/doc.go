// Package checkpoint writes the training state to disk and reads it back,
// so that a job that dies whole (preempted, requeued, its nodes rebooted)
// resumes where it was instead of at step 0, and resuming equals never
// having stopped.
//
// The training state is an elastic.State: the same handlers that elastic
// training commits in memory and syncs from rank 0 (the model with its
// optimizer state, the sampler's epoch and position, any gob-encodable
// objects such as the step, the epoch or a random generator) are what a
// checkpoint holds, each encoded by its elastic.Codec as one part:
//
//	state, _ := elastic.NewState(nil, elastic.Named("progress", objs),
//		elastic.Named("model", model), elastic.Named("sampler", elastic.NewSamplerHandler(sampler)))
//	ckpt, _ := checkpoint.New(dir, state, checkpoint.Runtime(hvd.Default()))
//	info, err := ckpt.Load(ctx) // every rank; errors.Is(err, checkpoint.ErrNoCheckpoint): start afresh
//	...
//	for ... { step++; if step%100 == 0 { err = ckpt.Save(ctx, step) } }
//	err = ckpt.Close(ctx)
//
// Save is collective. Rank 0 snapshots the state in memory and writes it
// in the background, atomically: a temporary file, synced, renamed into
// place, the directory synced; the next Save, Flush or Close waits for the
// write and reports its outcome on every rank. A file is a manifest
// (format version, step, size, and a CRC-32C of every part) and the parts;
// the newest Keep files stay.
//
// Load is collective too: rank 0 reads the newest checkpoint, verifies it
// whole, passes over a damaged one (reported by name, renamed aside) for
// the one before, and sends it to every rank, which decodes it into the
// state. Parts that do not fit the state (another model's names or
// shapes) are an error on every rank, and leave the state as it was; a
// checkpoint written at another number of ranks resumes at this one, the
// sampler re-dealing the rest of the epoch so that no sample is processed
// twice or skipped.
//
// An elastic job persists every k-th commit with PersistCommits, so that
// it resumes even after losing every worker. docs/CHECKPOINTS.md tells how
// to make any training loop resumable.
package checkpoint
