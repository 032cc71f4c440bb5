package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// scratchDirs are where a job may leave files behind: shared memory and
// the temporary directory (Open MPI's session directories, the embedded
// transport's Unix sockets where $XDG_RUNTIME_DIR is unset).
var scratchDirs = []string{"/dev/shm", os.TempDir()}

// jobPrefixes name what only a job of ours (or rankbench) creates in the
// scratch directories without a pid in the name: the MPI doorbell, the
// directory of Open MPI's shared-memory segments that our runtime makes,
// Open MPI's segments themselves. A job of another user's running at the
// same time may be blamed for these.
var jobPrefixes = []string{"gohorovod-doorbell-", "ghv-mpi-", "vader_segment", "sm_segment", "rankbench-"}

// snapshot lists the entries of the scratch directories, and of Open
// MPI's per-user session directories one level down (a job's own
// directory lies there), as paths.
func snapshot() map[string]bool {
	seen := make(map[string]bool)
	for _, d := range scratchDirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			p := filepath.Join(d, e.Name())
			seen[p] = true
			if e.IsDir() && (strings.HasPrefix(e.Name(), "ompi.") || strings.HasPrefix(e.Name(), "openmpi-sessions-")) {
				sub, _ := os.ReadDir(p)
				for _, s := range sub {
					seen[filepath.Join(p, s.Name())] = true
				}
			}
		}
	}
	return seen
}

// leftovers returns, sorted, the entries of after that were not in before
// and that belong to the job: their name starts with one of jobPrefixes,
// or it or, for a directory, a name in it holds one of the job's pids as a
// number of its own (the embedded transport's shared-memory files and
// Unix sockets, Open MPI's session directory). The scratch directories are
// shared with other users, whose new files are thus not blamed on the
// job.
func leftovers(before, after map[string]bool, pids []int) []string {
	own := make(map[string]bool, len(pids))
	for _, p := range pids {
		own[strconv.Itoa(p)] = true
	}
	var out []string
	for p := range after {
		if before[p] {
			continue
		}
		mine := hasPid(filepath.Base(p), own)
		for _, pre := range jobPrefixes {
			mine = mine || strings.HasPrefix(filepath.Base(p), pre)
		}
		if !mine {
			sub, _ := os.ReadDir(p)
			for _, s := range sub {
				mine = mine || hasPid(s.Name(), own)
			}
		}
		if mine {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// hasPid reports whether a run of digits in name is one of own.
func hasPid(name string, own map[string]bool) bool {
	for _, f := range strings.FieldsFunc(name, func(r rune) bool { return r < '0' || r > '9' }) {
		if own[f] {
			return true
		}
	}
	return false
}
