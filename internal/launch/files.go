package launch

import (
	"fmt"

	"github.com/gohorovod/gohorovod/internal/job/fdlimit"
)

// The descriptors the launcher holds for each worker of an embedded
// (--gloo) job: the read ends of its output pipes (2), its process
// handle (a pidfd, 1), its rendezvous connection (1), and the pidfd
// opened for the guard while it starts (1); a remote worker's standard
// input (1, ssh's), and its two files under --output-filename (2).
const (
	filesPerWorker       = 5
	filesPerRemoteWorker = 1
	filesPerOutputDir    = 2
)

// filesNeeded is how many descriptors the launcher needs for workers of
// which remote run through ssh, with --output-filename (outputs): a pure
// estimate, which fdlimit.Plan compares with RLIMIT_NOFILE (adding its
// Reserve for the launcher itself: the rendezvous' listener, the guard's
// pipe, the terminal).
func filesNeeded(workers, remote int, outputs bool) uint64 {
	n := workers*filesPerWorker + remote*filesPerRemoteWorker
	if outputs {
		n += workers * filesPerOutputDir
	}
	return uint64(n)
}

// ensureFiles raises this process's limit on open files to what a job of
// workers needs (see filesNeeded), or says, before anything is started,
// that the hard limit is too low and how to raise it.
func ensureFiles(workers, remote int, outputs bool) error {
	what := fmt.Sprintf("gohorovodrun with %d workers", workers)
	if _, err := fdlimit.Ensure(what, filesNeeded(workers, remote, outputs)); err != nil {
		return fmt.Errorf("cannot start the job: %w", err)
	}
	return nil
}

// glooFiles is ensureFiles for the workers of a plan.
func glooFiles(ws []GlooWorker, outputs bool) error {
	remote := 0
	for _, w := range ws {
		if w.Remote {
			remote++
		}
	}
	return ensureFiles(len(ws), remote, outputs)
}
