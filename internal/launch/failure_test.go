package launch

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Captured from Open MPI 4.1.4's mpirun on this machine, and from MPICH's
// Hydra documentation of its abort report.
const (
	ompiExit = `[1,1]<stderr>:rank1 failing
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[8718,1],1]
  Exit code:    3
--------------------------------------------------------------------------
`
	// gohorovodrun -np 4 worker-mpi train DIR, rank 2 sent SIGKILL while
	// training (Open MPI 4.1.4, captured whole).
	ompiSignaled = `--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun noticed that process rank 2 with PID 0 on node vm exited on signal 9 (Killed).
--------------------------------------------------------------------------
`
	ompiSegv = `mpirun noticed that process rank 0 with PID 4321 on node gpu-7 exited on signal 11 (Segmentation fault).
`
	ompiImproperExit = `mpirun has exited due to process rank 0 with PID 0 on
node vm exiting improperly. There are three reasons this could occur:
`
	hydraExit = `[1] failing
===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   RANK 1 PID 4242 RUNNING AT vm
=   EXIT CODE: 3
=   CLEANING UP REMAINING PROCESSES
=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES
===================================================================================
`
	// A Go panic on rank 2 (its trace follows the first line), with the
	// other ranks' output around it.
	ompiPanic = `[1,0]<stderr>:epoch 1 done
[1,2]<stderr>:loading shard 2
[1,2]<stderr>:panic: model: shape [3 4] is not [4 3]
[1,2]<stderr>:
[1,2]<stderr>:goroutine 1 [running]:
[1,2]<stderr>:main.main()
[1,1]<stderr>:panic: a later one on another rank
  Process name: [[8718,1],2]
  Exit code:    2
`
	// A worker's error after a stall shutdown (the runtime's long message,
	// compacted to its cause), after the runtime's own ERR line.
	ompiShutdown = `[1,0]<stderr>:5:54AM ERR the stall inspector is shutting the job down; goroutine stacks follow:
[1,0]<stderr>:goroutine 1 [running]:
[1,0]<stderr>:worker 0: allreduce x: hvd: Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt to allreduce. Cause: hvd: stall inspector: rank 1 never submitted allreduce.x
  Process name: [[8718,1],0]
  Exit code:    3
`
	// The runtime's own log line on the failing rank, then a plain one.
	ompiRuntimeErr = `[1,0]<stderr>:12:00:01 ERR Horovod background loop uncaught exception error="cache agreement: comm: rank 1 failed: link down" rank=0
[1,0]<stderr>:exiting
  Process name: [[8718,1],0]
  Exit code:    1
`
	hydraSignaled = `=   RANK 3 PID 4242 RUNNING AT vm
=   KILLED BY SIGNAL: 9 (Killed)
`
)

func TestFailureScanner(t *testing.T) {
	tests := []struct {
		name   string
		stderr string
		status int
		want   WorkerError
		text   string
	}{
		{"open mpi exit code", ompiExit, 3, WorkerError{Rank: 1, Code: 3, LastWords: "rank1 failing"},
			"rank 1 exited with status 3; the other workers were stopped. Its last error output: rank1 failing"},
		{"open mpi panic", ompiPanic, 2, WorkerError{Rank: 2, Code: 2, LastWords: "panic: model: shape [3 4] is not [4 3]"},
			"rank 2 exited with status 2; the other workers were stopped. Its last error output: panic: model: shape [3 4] is not [4 3]"},
		{"open mpi shutdown cause", ompiShutdown, 3, WorkerError{Rank: 0, Code: 3,
			LastWords: "worker 0: allreduce x: hvd: Horovod has been shut down. Cause: hvd: stall inspector: rank 1 never submitted allreduce.x"},
			"Its last error output: worker 0: allreduce x: hvd: Horovod has been shut down. Cause: hvd: stall inspector"},
		{"open mpi runtime error", ompiRuntimeErr, 1, WorkerError{Rank: 0, Code: 1,
			LastWords: `12:00:01 ERR Horovod background loop uncaught exception error="cache agreement: comm: rank 1 failed: link down" rank=0`},
			"Its last error output: 12:00:01 ERR Horovod background loop uncaught exception"},
		{"open mpi signal", ompiSignaled, 137, WorkerError{Rank: 2, Code: 137, Signal: 9, Host: "vm"},
			"rank 2 (on host vm) was killed by signal 9 (SIGKILL); the other workers were stopped"},
		{"open mpi signal with pid", ompiSegv, 139, WorkerError{Rank: 0, Code: 139, Signal: 11, Host: "gpu-7", PID: 4321},
			"rank 0 (pid 4321 on host gpu-7) was killed by signal 11 (SIGSEGV)"},
		{"open mpi improper exit", ompiImproperExit, 1, WorkerError{Rank: 0, Code: 1}, "rank 0 exited with status 1"},
		{"hydra exit code", hydraExit, 3, WorkerError{Rank: 1, Code: 3, Host: "vm", PID: 4242}, "rank 1 (pid 4242 on host vm) exited with status 3"},
		{"hydra signal", hydraSignaled, 9, WorkerError{Rank: 3, Code: 9, Signal: 9, Host: "vm", PID: 4242},
			"rank 3 (pid 4242 on host vm) was killed by signal 9 (SIGKILL)"},
		{"nothing recognisable", "oops\n", 7, WorkerError{Rank: -1, Code: 7}, "a worker exited with status 7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pass bytes.Buffer
			f := newFailureScanner()
			tap := &lineTap{w: &pass, onLine: f.Line}
			// Feed in awkward pieces: the tap must reassemble lines.
			for i := 0; i < len(tt.stderr); i += 7 {
				tap.Write([]byte(tt.stderr[i:min(i+7, len(tt.stderr))]))
			}
			if pass.String() != tt.stderr {
				t.Errorf("the tap changed the stream")
			}
			got := f.result(tt.status)
			if *got != tt.want || !strings.Contains(got.Error(), tt.text) {
				t.Errorf("result = %+v (%q), want %+v (%q)", *got, got, tt.want, tt.text)
			}
		})
	}
}

func TestWorkerErrorText(t *testing.T) {
	tests := []struct {
		e    WorkerError
		want string
	}{
		{WorkerError{Rank: 2, Signal: 9, Host: "vm", PID: 1234}, "rank 2 (pid 1234 on host vm) was killed by signal 9 (SIGKILL); the other workers were stopped"},
		{WorkerError{Rank: 2, Signal: 15, PID: 1234}, "rank 2 (pid 1234) was killed by signal 15 (SIGTERM);"},
		{WorkerError{Rank: -1, Signal: 6}, "a worker was killed by signal 6 (SIGABRT);"},
		{WorkerError{Rank: 1, Code: 3, Host: "h1"}, "rank 1 (on host h1) exited with status 3;"},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); !strings.HasPrefix(got, tt.want) {
			t.Errorf("%+v: %q, want prefix %q", tt.e, got, tt.want)
		}
	}
}

func TestSignalName(t *testing.T) {
	for n, want := range map[int]string{1: "SIGHUP", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM", 31: "SIGSYS",
		34: "SIGRTMIN+0", 36: "SIGRTMIN+2", 64: "SIGRTMIN+30", 0: "signal 0", 32: "signal 32", 99: "signal 99", -1: "signal -1"} {
		if got := SignalName(n); got != want {
			t.Errorf("SignalName(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{usagef("bad"), 2},
		{&WorkerError{Rank: 1, Code: 3}, 3},
		{&WorkerError{Rank: 1, Code: 0}, 1},
		{&WorkerError{Rank: 1, Code: 300}, 1},
		{ErrInterrupted, 130},
		{ErrPreempted, ExitPreempted},
		{bytes.ErrTooLarge, 1},
	}
	for _, tt := range tests {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

// TestFailureScannerSeesTheAbort: Open MPI's banner that it aborts the job
// counts as the failure being reported (so that the launcher gives mpirun
// FailureGrace to end), without naming a rank that it has not named.
func TestFailureScannerSeesTheAbort(t *testing.T) {
	f := newFailureScanner()
	f.Line("[1,0]<stderr>:hvd: rank 2: its node (host n2) went silent: ...")
	if f.aborted || f.seen {
		t.Fatal("a rank's own line is not mpirun's abort")
	}
	for _, l := range []string{
		"--------------------------------------------------------------------------",
		"Primary job  terminated normally, but 1 process returned",
		"a non-zero exit code. Per user-direction, the job has been aborted.",
	} {
		f.Line(l)
	}
	if !f.aborted || f.seen || f.rank != -1 {
		t.Errorf("after the banner: aborted %v, seen %v, rank %d; want aborted, no rank named", f.aborted, f.seen, f.rank)
	}
}

// TestKilledWorkerOutranksItsPeers: a --gloo job's cause is the worker
// killed by a signal the launcher did not send, even when a peer's own exit
// (it lost its connection to the killed one) was seen first; the
// launcher's own SIGTERM, and its SIGKILL after the grace period, are no
// cause.
func TestKilledWorkerOutranksItsPeers(t *testing.T) {
	exit3 := &WorkerError{Rank: 0, Code: 3}
	killed := func(sig syscall.Signal) *WorkerError {
		return &WorkerError{Rank: 1, Code: 128 + int(sig), Signal: int(sig)}
	}
	for _, tt := range []struct {
		name      string
		first, c  *WorkerError
		escalated bool
		want      bool
	}{
		{"SIGKILL from outside after a peer's exit", exit3, killed(syscall.SIGKILL), false, true},
		{"a crash after a peer's exit", exit3, killed(syscall.SIGSEGV), false, true},
		{"the launcher's SIGTERM", exit3, killed(syscall.SIGTERM), false, false},
		{"the launcher's SIGKILL after the grace period", exit3, killed(syscall.SIGKILL), true, false},
		{"a peer's exit after a kill", killed(syscall.SIGKILL), exit3, false, false},
		{"a second kill", killed(syscall.SIGKILL), killed(syscall.SIGSEGV), false, false},
	} {
		r := &glooRun{first: tt.first}
		r.stop.stopping = true
		if !tt.escalated {
			r.stop.kill = make(chan time.Time)
		}
		if got := r.outranks(tt.c); got != tt.want {
			t.Errorf("%s: outranks = %v, want %v", tt.name, got, tt.want)
		}
	}
}
