package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gohorovod/gohorovod/runtime/config"
)

// mpiRun is the run path of a job under mpirun: it runs the plan and
// turns mpirun's end into Run's result. It bounds its own teardown
// whatever mpirun does: mpirun runs in a process group of its own; after
// an interrupt (ctx) mpirun has StopGrace to stop the workers, and after
// the first failure FailureGrace to end the job itself; then the launcher
// sends SIGTERM to every process of the job it knows (jobProcs), and
// SIGKILL StopGrace later. A job on this host alone keeps Open MPI's
// shared-memory segments in a directory of its own, which is removed when
// the job ends.
type mpiRun struct {
	l        *Launcher
	p        Plan
	cmd      *exec.Cmd
	name     string // mpirun's base name, for the messages
	dirs     []string
	mark     string // the launcher's mark in the job's environments
	scan     *failureScanner
	reported chan struct{} // closed at the first failure mpirun reports
	procs    *jobProcs

	interrupted bool
	tornDown    bool            // the launcher ended the job's processes itself
	found       *jobFailure     // the first failure seen in /proc
	failed      <-chan struct{} // reported, until seen
	teardown    <-chan time.Time
	kill        <-chan time.Time
	giveUp      <-chan time.Time
	stuck       bool // mpirun outlived SIGKILL: its output may still be read
	finished    bool // every rank ended with status 0, mpirun has not
}

func (r *mpiRun) forwards() bool { return true }

func (r *mpiRun) plan(_ context.Context, td *teardown) error {
	p := r.p
	r.name = filepath.Base(p.Argv[0])
	r.cmd = exec.Command(p.Argv[0], p.Argv[1:]...)
	r.cmd.Env = p.Env
	if p.VaderDir != "" {
		r.cmd.Env = append(append([]string(nil), p.Env...), EnvVaderDir+"="+p.VaderDir)
		r.dirs = append(r.dirs, p.VaderDir)
		td.add(func() { os.RemoveAll(p.VaderDir) })
	}
	r.cmd.Stdin, r.cmd.Stdout = r.l.Stdin, r.l.Stdout
	r.scan = newFailureScanner()
	r.reported = make(chan struct{})
	r.cmd.Stderr = &lineTap{w: r.l.Stderr, onLine: func(line string) {
		// A rank's failure reported, or mpirun aborting the job: from
		// then on mpirun has FailureGrace to end (it may wait on a node
		// that cannot be reached, whose network went silent).
		was := r.scan.seen || r.scan.aborted
		r.scan.Line(line)
		if (r.scan.seen || r.scan.aborted) && !was {
			close(r.reported)
		}
	}}
	// After mpirun has ended, its output may still be held open by a
	// process it left behind: the launcher stops reading after StopGrace.
	r.cmd.WaitDelay = StopGrace
	// If the launcher dies without stopping mpirun (SIGKILL), the guard
	// does it; without a guard, a parent-death signal.
	r.cmd.SysProcAttr = workerProcAttr(r.l.Guard == "")
	if isTerminal(r.l.Stdin) && r.cmd.SysProcAttr != nil {
		r.cmd.SysProcAttr.Setpgid = false // see isTerminal
	}
	if v, ok := envValue(p.Env, config.EnvLauncher); ok && v != "" {
		r.mark = config.EnvLauncher + "=" + v
	}
	return nil
}

func (r *mpiRun) start(_ context.Context, td *teardown) error {
	release := make(chan struct{})
	td.add(func() { close(release) })
	var err error
	if r.l.Guard != "" {
		err = r.cmd.Start()
	} else {
		err = startLocked(r.cmd, release)
	}
	if err != nil {
		return fmt.Errorf("starting %s: %w", r.p.Argv[0], err)
	}
	r.l.guardJob(td, []*os.Process{r.cmd.Process}, r.dirs, r.mark, func(err error) string {
		return fmt.Sprintf("no guard for mpirun (%v): if gohorovodrun is killed, "+
			"mpirun is not stopped (workers on this host still exit)", err)
	})
	r.procs = newJobProcs(r.cmd.Process.Pid, r.mark)
	return nil
}

// watch waits for mpirun. A stop signal goes to mpirun as SIGUSR1, which
// Open MPI's mpirun passes on to every rank (on SIGTERM it would kill
// them).
func (r *mpiRun) watch(ctx context.Context, w *watching) error {
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	r.failed = r.reported
	tick := time.NewTicker(scanEvery)
	defer tick.Stop()
	ctxDone := ctx.Done()
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-ctxDone:
			ctxDone, r.failed = nil, nil
			r.interrupted = true
			// mpirun stops every worker on SIGTERM; after StopGrace, the
			// launcher stops what is left.
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			r.teardown = time.After(StopGrace)
		case <-w.signals:
			_ = r.cmd.Process.Signal(syscall.SIGUSR1)
		case <-r.failed:
			r.failed = nil
			if r.teardown == nil && r.kill == nil {
				r.teardown = time.After(FailureGrace)
			}
		case <-tick.C:
			r.scanProcs()
		case <-r.teardown:
			r.stopAll(r.teardownReason())
		case <-r.kill:
			r.kill = nil
			r.procs.scan(true)
			r.procs.signal(syscall.SIGKILL)
			r.giveUp = time.After(StopGrace)
		case <-r.giveUp:
			// Not even SIGKILL ends a process in uninterruptible sleep:
			// the launcher does not wait for it.
			fmt.Fprintf(r.l.Stderr, "gohorovodrun: %s (pid %d) still there %v after SIGKILL; not waiting for it\n", r.name, r.cmd.Process.Pid, StopGrace)
			err = fmt.Errorf("%s (pid %d) did not end after SIGKILL", r.name, r.cmd.Process.Pid)
			waiting, r.stuck = false, true
		}
	}
	return r.result(err, w.pre)
}

// scanProcs looks at the job's processes: the first failure seen starts
// mpirun's FailureGrace, as does every rank of a job on this host having
// ended well while mpirun has not reaped them.
func (r *mpiRun) scanProcs() {
	p := r.p
	if f, ok := r.procs.scan(false); ok && r.found == nil {
		r.found = &f
		if r.failed != nil {
			r.failed = nil
			r.teardown = time.After(FailureGrace)
		}
	} else if p.VaderDir != "" && p.NP > 0 && r.procs.endedRanks() == p.NP && r.teardown == nil && r.kill == nil && !r.finished {
		r.finished, r.failed = true, nil
		r.teardown = time.After(FailureGrace)
	}
}

func (r *mpiRun) teardownReason() string {
	switch {
	case r.interrupted:
		return fmt.Sprintf("%s did not stop the job within %v of SIGTERM", r.name, StopGrace)
	case r.finished && r.found == nil:
		return fmt.Sprintf("every rank has ended with status 0, but %s did not end within %v", r.name, FailureGrace)
	}
	return fmt.Sprintf("%s did not end the job within %v of the first failure", r.name, FailureGrace)
}

// stopAll ends every process of the job the launcher knows: SIGTERM now,
// SIGKILL after StopGrace.
func (r *mpiRun) stopAll(why string) {
	r.tornDown, r.teardown = true, nil
	r.procs.scan(true)
	fmt.Fprintf(r.l.Stderr, "gohorovodrun: %s; stopping every process of the job (SIGTERM, SIGKILL after %v)\n", why, StopGrace)
	r.procs.signal(syscall.SIGTERM)
	r.kill = time.After(StopGrace)
}

// result turns mpirun's end (err, its Wait's) into Run's result, after
// stopping whatever mpirun left running.
func (r *mpiRun) result(err error, pre *preemption) error {
	if r.stuck {
		// scan is still being fed: only what the launcher saw itself.
		switch {
		case r.interrupted:
			return ErrInterrupted
		case r.found != nil:
			return r.found.workerError()
		}
		return err
	}
	if r.interrupted || r.tornDown || r.found != nil || r.scan.seen || err != nil {
		r.stopLeft()
	}
	if r.interrupted {
		return ErrInterrupted
	}
	if err == nil || r.finished && r.tornDown && r.found == nil && !r.scan.seen {
		return nil // every rank ended well; mpirun was stopped after them
	}
	if status := exitStatus(err); (pre.exited(status) || pre.preempting()) && r.found == nil {
		// mpirun passes on the first non-zero status of a rank: every
		// rank stopped at a step boundary (ExitPreempted), or was
		// stopped by the signal passed on.
		return pre.result(err)
	}
	return r.failure(err)
}

// stopLeft ends whatever mpirun left running (it ended, or was killed,
// before its workers): SIGTERM, then SIGKILL.
func (r *mpiRun) stopLeft() {
	r.procs.scan(true)
	if left := r.procs.alive(); len(left) > 0 {
		r.procs.signal(syscall.SIGTERM)
		deadline := time.Now().Add(StopGrace)
		for len(r.procs.alive()) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		r.procs.signal(syscall.SIGKILL)
	}
}

// failure is the result of a job that mpirun ended with err.
func (r *mpiRun) failure(err error) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("%s: %w", r.name, err)
	}
	status := ee.ExitCode()
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		if !r.scan.seen && r.found != nil {
			return r.found.workerError()
		}
		if !r.scan.seen { // no rank failed: mpirun itself was killed
			return fmt.Errorf("%s was killed by signal %d (%s)", r.name, int(ws.Signal()), SignalName(int(ws.Signal())))
		}
		status = 128 + int(ws.Signal())
	}
	if !r.scan.seen && r.found != nil {
		return r.found.workerError()
	}
	return r.scan.result(status)
}
