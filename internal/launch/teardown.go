package launch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gohorovod/gohorovod/internal/sockdir"
)

// FailureGrace is how long mpirun has to end the job itself after the
// launcher has seen the first failure (a rank's report on mpirun's stderr,
// or one of the job's processes ended with a non-zero status) before the
// launcher ends every process of the job: SIGTERM, and SIGKILL StopGrace
// later.
const FailureGrace = 3 * time.Second

// scanEvery is how often the launcher looks at the processes of an MPI job.
const scanEvery = 250 * time.Millisecond

// jobFailure is a process of an MPI job that the launcher found ended with
// a non-zero status.
type jobFailure struct {
	pid, rank, code, signal int
}

// workerError is f in the words of a rank's report.
func (f jobFailure) workerError() *WorkerError {
	return &WorkerError{Rank: f.rank, Code: f.code, Signal: f.signal, PID: f.pid}
}

// envValue returns the value of key in env ("KEY=value" strings), the last
// one winning, and whether it is there.
func envValue(env []string, key string) (string, bool) {
	v, ok := "", false
	for _, kv := range env {
		if k, val, found := strings.Cut(kv, "="); found && k == key {
			v, ok = val, true
		}
	}
	return v, ok
}

// EnvVaderDir is Open MPI's variable for the directory of its shared-memory
// (vader) segments. For a job on this host alone the launcher points it at
// a directory of the job's own (vaderDir), which it removes when the job
// ends, so that a job whose workers were killed leaves no segment in
// /dev/shm. A value set by the user (in the environment or --mpi-args) is
// kept.
const EnvVaderDir = "OMPI_MCA_btl_vader_backing_directory"

// shmBase is where vaderDir creates the job's directory (a variable for
// tests).
var shmBase = "/dev/shm"

// vaderDir creates a directory for the job's vader segments in shmBase,
// only this user's (mode 0700), with an unpredictable name; "" when there
// is no shmBase or the user chose one.
func vaderDir(env, mpiArgs []string) (string, error) {
	if _, ok := envValue(env, EnvVaderDir); ok {
		return "", nil
	}
	for _, a := range mpiArgs {
		if strings.Contains(a, "btl_vader_backing_directory") {
			return "", nil
		}
	}
	if st, err := os.Stat(shmBase); err != nil || !st.IsDir() {
		return "", nil
	}
	return os.MkdirTemp(shmBase, "ghv-mpi-")
}

// jobDirBase is where a job's private directories (the Unix sockets of the
// embedded transport) go: $XDG_RUNTIME_DIR, else $TMPDIR, else /tmp (as
// looked up in env, the launcher's environment), the first that is a
// directory with a path short enough for the sockets in it (a Unix
// socket's path has at most 107 bytes).
func jobDirBase(env []string) string {
	for _, k := range []string{"XDG_RUNTIME_DIR", "TMPDIR"} {
		if v, ok := envValue(env, k); ok && filepath.IsAbs(v) && len(v) <= maxBaseLen {
			if st, err := os.Stat(v); err == nil && st.IsDir() {
				return v
			}
		}
	}
	return "/tmp"
}

// maxBaseLen leaves room under a job directory's base for the directory
// and a socket's name in it.
const maxBaseLen = 64

// jobSocketDir makes the job's directory for the Unix sockets of its
// local workers: only this user may enter it (mode 0700), its name is not
// predictable, and the launcher (or its guard, when the launcher is
// killed) removes it when the job ends, so that no socket file outlives
// the job and nothing another local user creates can stop it. It is
// locked while the launcher lives, and making it removes the directories
// that dead processes left there (package sockdir); remove it with
// sockdir.Remove.
func jobSocketDir(env []string) (string, error) {
	dir, err := sockdir.Make(jobDirBase(env))
	if err != nil {
		return "", fmt.Errorf("launch: a directory for the job's Unix sockets: %w", err)
	}
	return dir, nil
}
