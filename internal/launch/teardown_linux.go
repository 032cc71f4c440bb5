package launch

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// jobProcs follows the processes of one MPI job from /proc, so that the
// launcher can end them itself when mpirun does not (a wedged mpirun, one
// that ignores SIGTERM, workers it never reaps): mpirun's descendants, and
// every process of this user whose environment carries the job's mark
// (mpirun passes its environment to the workers it starts, so a worker
// that lost its parent still carries it).
type jobProcs struct {
	root      int    // mpirun's pid
	rootStart string // its start time: once reaped, its pid names no one
	mark      []byte // "KEY=value" in the job's environment; nil: none
	// known are the processes seen as the job's, by pid, with their start
	// time, so that a pid reused by another process is never signalled.
	known map[int]*jobProc
	// ended holds the ranks the last scan found ended with status 0 (or
	// ExitPreempted) and not yet reaped.
	ended map[int]bool
}

type jobProc struct {
	start string // field 22 of /proc/PID/stat
	rank  int    // from the process's environment; -1: unknown
}

// procStat is what /proc/PID/stat says of one process.
type procStat struct {
	pid, ppid, pgrp int
	state           byte
	start           string
	exit            int // the wait status of a zombie
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return procStat{}, false
	}
	s := procStat{pid: pid, state: f[0][0], start: f[19]}
	s.ppid, _ = strconv.Atoi(f[1])
	s.pgrp, _ = strconv.Atoi(f[2])
	if len(f) >= 50 {
		s.exit, _ = strconv.Atoi(f[49])
	}
	return s, true
}

func newJobProcs(root int, mark string) *jobProcs {
	j := &jobProcs{root: root, known: map[int]*jobProc{}}
	if s, ok := readStat(root); ok && root > 0 {
		j.rootStart = s.start
	}
	if mark != "" {
		j.mark = []byte(mark)
	}
	return j
}

// allStats reads every process's stat.
func allStats() []procStat {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	out := make([]procStat, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if s, ok := readStat(pid); ok {
			out = append(out, s)
		}
	}
	return out
}

// rootThere reports whether mpirun's pid still names mpirun (it has not
// been reaped). A jobProcs made with no root (0) has none.
func (j *jobProcs) rootThere() bool {
	if j.root <= 0 || j.rootStart == "" {
		return false
	}
	s, ok := readStat(j.root)
	return ok && s.start == j.rootStart
}

// descendants reads the stat of root's descendants (zombies included)
// through /proc/PID/task/TID/children, which costs in proportion to the
// job, not to the machine; false where the kernel has no such file.
func descendants(root int) ([]procStat, bool) {
	var out []procStat
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			continue // ended
		}
		for _, t := range tasks {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/children")
			if errors.Is(err, os.ErrNotExist) && pid == root {
				if _, serr := os.Stat("/proc/" + strconv.Itoa(pid)); serr == nil {
					return nil, false
				}
			}
			for _, f := range strings.Fields(string(b)) {
				c, err := strconv.Atoi(f)
				if err != nil {
					continue
				}
				if st, ok := readStat(c); ok {
					out = append(out, st)
					queue = append(queue, c)
				}
			}
		}
	}
	return out, true
}

// rankOf reads the MPI rank from a process's environment (Open MPI's
// OMPI_COMM_WORLD_RANK, Hydra's PMI_RANK); -1 when it has none.
func rankOf(env []byte) int {
	for _, kv := range bytes.Split(env, []byte{0}) {
		for _, k := range []string{"OMPI_COMM_WORLD_RANK=", "PMI_RANK="} {
			if v, ok := bytes.CutPrefix(kv, []byte(k)); ok {
				if r, err := strconv.Atoi(string(v)); err == nil {
					return r
				}
			}
		}
	}
	return -1
}

func hasEntry(env, kv []byte) bool {
	for _, e := range bytes.Split(env, []byte{0}) {
		if bytes.Equal(e, kv) {
			return true
		}
	}
	return false
}

// scan looks at every process once: it adds mpirun's descendants, and with
// sweep also the processes that carry the mark, to known, and returns the
// first rank found ended (a zombie mpirun has not reaped yet) with a
// non-zero status, if any; it also counts the ranks ended with status 0
// (endedRanks).
func (j *jobProcs) scan(sweep bool) (failed jobFailure, ok bool) {
	var stats []procStat
	root := j.rootThere()
	switch {
	case sweep:
		stats = allStats()
	case !root:
	default:
		if stats, ok = descendants(j.root); !ok {
			stats = allStats() // a kernel without /proc/PID/task/TID/children
		}
	}
	j.learn(stats, root, sweep)
	return j.failure(stats)
}

// learn adds to the known processes those of stats that are the job's:
// mpirun's descendants (while root: its pid still names it), and with
// sweep every process whose environment has the job's mark.
func (j *jobProcs) learn(stats []procStat, root, sweep bool) {
	children := map[int][]procStat{}
	for _, s := range stats {
		children[s.ppid] = append(children[s.ppid], s)
	}
	queue := []int{j.root}
	if !root {
		queue = nil
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			j.add(c)
			queue = append(queue, c.pid)
		}
	}
	if sweep && j.mark != nil {
		self := os.Getpid()
		for _, s := range stats {
			if s.pid == self || s.pid == j.root || s.state == 'Z' {
				continue
			}
			env, err := os.ReadFile("/proc/" + strconv.Itoa(s.pid) + "/environ")
			if err == nil && hasEntry(env, j.mark) {
				j.add(s)
			}
		}
	}
}

// add knows s as a process of the job.
func (j *jobProcs) add(s procStat) {
	p, ok := j.known[s.pid]
	if !ok || p.start != s.start {
		p = &jobProc{start: s.start, rank: -1}
		j.known[s.pid] = p
	}
	// Read again until a rank shows: between fork and exec a worker
	// still has mpirun's environment.
	if p.rank < 0 && s.state != 'Z' {
		if env, err := os.ReadFile("/proc/" + strconv.Itoa(s.pid) + "/environ"); err == nil {
			p.rank = rankOf(env)
		}
	}
}

// failure finds, among the known processes in stats, the ranks that have
// ended (not yet reaped): those that ended well are noted in j.ended, and
// the first that failed is the result.
func (j *jobProcs) failure(stats []procStat) (failed jobFailure, ok bool) {
	byPID := make(map[int]procStat, len(stats))
	for _, s := range stats {
		byPID[s.pid] = s
	}
	j.ended = map[int]bool{}
	var fail *jobFailure
	for _, s := range stats {
		p, ok := j.known[s.pid]
		if !ok || p.start != s.start || s.state != 'Z' || p.rank < 0 {
			continue
		}
		// A rank, not a program a rank started (which inherits its
		// environment, and may fail without failing the job): its parent
		// is mpirun, or a process of the MPI launcher's that is no rank.
		if parent, ok := j.known[s.ppid]; s.ppid != j.root && (!ok || parent.rank >= 0 || byPID[s.ppid].start != parent.start) {
			continue
		}
		// A rank that was preempted (it stopped at a step boundary and
		// exited with ExitPreempted) ended as it should.
		if ws := syscall.WaitStatus(s.exit); s.exit == 0 || ws.Exited() && ws.ExitStatus() == ExitPreempted {
			j.ended[p.rank] = true
			continue
		}
		if fail != nil {
			continue
		}
		ws := syscall.WaitStatus(s.exit)
		f := jobFailure{pid: s.pid, rank: p.rank, code: ws.ExitStatus()}
		if ws.Signaled() {
			f.signal = int(ws.Signal())
			f.code = 128 + f.signal
		}
		fail = &f
	}
	if fail != nil {
		return *fail, true
	}
	return jobFailure{}, false
}

// endedRanks is the number of ranks the last scan found ended with status
// 0 and not reaped by mpirun.
func (j *jobProcs) endedRanks() int { return len(j.ended) }

// signal sends sig to mpirun and its process group while mpirun is still
// there (not reaped), and to every known process of the job that still is
// what it was, and to its group where it leads one (Open MPI puts each
// worker in a group of its own).
func (j *jobProcs) signal(sig syscall.Signal) {
	if j.rootThere() {
		_ = syscall.Kill(-j.root, sig)
		_ = syscall.Kill(j.root, sig)
	}
	for pid, p := range j.known {
		s, ok := readStat(pid)
		if !ok || s.start != p.start || s.state == 'Z' {
			continue
		}
		_ = syscall.Kill(pid, sig)
		if s.pgrp == pid {
			_ = syscall.Kill(-pid, sig)
		}
	}
}

// alive reports the known processes that still run (not zombies).
func (j *jobProcs) alive() []int {
	var out []int
	for pid, p := range j.known {
		if s, ok := readStat(pid); ok && s.start == p.start && s.state != 'Z' {
			out = append(out, pid)
		}
	}
	return out
}
