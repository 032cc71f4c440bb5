package launch

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestJobProcsFindsFailedRank: under a stand-in for mpirun that reaps
// nothing, rank 1 exits 3 and a program rank 0 started exits 1; scan
// reports rank 1 (the program's failure is not the job's), and signal ends
// every process of the tree, the stand-in's group and the ranks' own.
func TestJobProcsFindsFailedRank(t *testing.T) {
	root := exec.Command("/bin/sh", "-c", `
OMPI_COMM_WORLD_RANK=0 setsid sh -c '(sleep 0.2; exit 1) & exec sleep 30' &
OMPI_COMM_WORLD_RANK=1 sh -c 'sleep 1; exit 3' &
exec sleep 30`)
	root.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := root.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-root.Process.Pid, syscall.SIGKILL); _ = root.Wait() }()
	j := newJobProcs(root.Process.Pid, "")
	var (
		f  jobFailure
		ok bool
	)
	for deadline := time.Now().Add(20 * time.Second); !ok && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		f, ok = j.scan(false)
	}
	if !ok {
		t.Fatal("no failure found in 20 s")
	}
	if f.rank != 1 || f.code != 3 || f.signal != 0 {
		t.Errorf("scan found %+v, want rank 1 with status 3", f)
	}
	if len(j.alive()) == 0 {
		t.Fatal("no live process of the job known")
	}
	j.signal(syscall.SIGKILL)
	for deadline := time.Now().Add(10 * time.Second); len(j.alive()) > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if left := j.alive(); len(left) > 0 {
		t.Errorf("still running after SIGKILL: %v", left)
	}
}
