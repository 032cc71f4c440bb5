// Package elastic holds the building blocks of elastic training (issue 14):
// the State that a training function commits, restores and syncs, its
// handlers, and a Sampler that resumes mid-epoch after the group changes
// size.
//
// NOT BUILT YET: elastic.Run (the loop that restores the last commit on a
// worker failure, re-forms the group, runs the reset callbacks, syncs from
// the new rank 0 and calls the training function again) and the launcher's
// elastic driver (host discovery, blacklisting, rendezvous rounds) do not
// exist yet; see issue 14. This package is therefore not a complete elastic
// mode: nothing here survives a lost worker on its own.
//
// What there is:
//
//   - State combines Handlers. Commit snapshots every handler in memory
//     (and then runs a hook where the host-update check will go), Restore
//     goes back to the last snapshot, Sync copies rank 0's values to every
//     rank through a Broadcaster and snapshots them, and Reset runs the
//     registered reset callbacks in order (Horovod's State, section 4.3 of
//     the reference).
//   - Objects handles any gob-encodable values (Horovod's ObjectState),
//     Optimizer handles an optim.Optimizer with its parameters, and
//     SamplerHandler handles a Sampler.
//   - Sampler deals a seeded per-epoch permutation of a dataset over the
//     current size, records how many samples of the epoch the group has
//     processed, and after a resize (SetPlacement) or a Restore deals the
//     remaining samples over the new size: no committed sample is repeated
//     and none is skipped.
//   - FromRuntime adapts an *hvd.Runtime to the Broadcaster that Sync uses;
//     tests use any other implementation.
//
// As in Horovod, no collective may run between Init and the start of
// elastic training: a worker that joins later would wait forever on it.
package elastic
