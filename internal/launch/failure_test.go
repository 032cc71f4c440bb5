package launch

import (
	"bytes"
	"strings"
	"testing"
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
	ompiSignaled = `--------------------------------------------------------------------------
mpirun noticed that process rank 2 with PID 0 on node vm exited on signal 9 (Killed).
--------------------------------------------------------------------------
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
		{"open mpi exit code", ompiExit, 3, WorkerError{Rank: 1, Code: 3}, "rank 1 exited with status 3"},
		{"open mpi signal", ompiSignaled, 137, WorkerError{Rank: 2, Code: 137, Signal: "9 (Killed)"}, "rank 2 was killed by signal 9 (Killed)"},
		{"open mpi improper exit", ompiImproperExit, 1, WorkerError{Rank: 0, Code: 1}, "rank 0 exited with status 1"},
		{"hydra exit code", hydraExit, 3, WorkerError{Rank: 1, Code: 3}, "rank 1 exited with status 3"},
		{"hydra signal", hydraSignaled, 9, WorkerError{Rank: 3, Code: 9, Signal: "9 (Killed)"}, "rank 3 was killed by signal 9"},
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
		{bytes.ErrTooLarge, 1},
	}
	for _, tt := range tests {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}
