package transport

import (
	"io/fs"
	"os/exec"
	goruntime "runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/procid"
)

func TestJudgeLauncher(t *testing.T) {
	l := procid.ID{PID: 42, Start: 1000, Boot: "b", NS: "pid:[1]"}
	here := procid.Here{Boot: "b", NS: "pid:[1]"}
	running := procid.Stat{State: 'S', Start: 1000}
	tests := []struct {
		name string
		l    procid.ID
		here procid.Here
		st   procid.Stat
		err  error
		want launcherVerdict
	}{
		{"running", l, here, running, nil, launcherAlive},
		{"running flat out", l, here, procid.Stat{State: 'R', Start: 1000}, nil, launcherAlive},
		{"no such pid", l, here, procid.Stat{}, fs.ErrNotExist, launcherGone},
		{"zombie, not yet reaped", l, here, procid.Stat{State: 'Z', Start: 1000}, nil, launcherGone},
		{"pid reused", l, here, procid.Stat{State: 'S', Start: 2000}, nil, launcherGone},
		{"unreadable: assume alive", l, here, procid.Stat{}, fs.ErrPermission, launcherAlive},
		{"malformed: assume alive", l, here, procid.Stat{}, procid.ErrBadStat, launcherAlive},
		{"another host", l, procid.Here{Boot: "other", NS: "pid:[1]"}, procid.Stat{}, fs.ErrNotExist, launcherUnseen},
		{"another container", l, procid.Here{Boot: "b", NS: "pid:[9]"}, procid.Stat{}, fs.ErrNotExist, launcherUnseen},
		{"no launcher named", procid.ID{}, here, procid.Stat{}, fs.ErrNotExist, launcherUnseen},
	}
	for _, tt := range tests {
		if got := judgeLauncher(tt.l, tt.here, tt.st, tt.err); got != tt.want {
			t.Errorf("%s: judgeLauncher = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestWatchLauncher runs the watch over a scripted /proc: it must call gone
// once the launcher disappears, and return without calling it when
// stopped.
func TestWatchLauncher(t *testing.T) {
	l := procid.ID{PID: 42, Start: 7, Boot: "b", NS: "n"}
	here := procid.Here{Boot: "b", NS: "n"}
	var reads atomic.Int32
	read := func(pid int) (procid.Stat, error) {
		if pid != 42 {
			t.Errorf("read pid %d, want 42", pid)
		}
		if reads.Add(1) > 3 {
			return procid.Stat{}, fs.ErrNotExist
		}
		return procid.Stat{State: 'S', Start: 7}, nil
	}
	gone := make(chan struct{})
	done := make(chan struct{})
	go func() {
		watchLauncher(l, here, time.Millisecond, make(chan struct{}), read, func() { close(gone) })
		close(done)
	}()
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not notice the launcher was gone")
	}
	<-done
	if n := reads.Load(); n != 4 {
		t.Errorf("%d reads, want 4 (three alive, then gone)", n)
	}

	stop := make(chan struct{})
	done = make(chan struct{})
	go func() {
		watchLauncher(l, here, time.Millisecond, stop, func(int) (procid.Stat, error) {
			return procid.Stat{State: 'S', Start: 7}, nil
		}, func() { t.Error("gone called for a live launcher") })
		close(done)
	}()
	time.Sleep(5 * time.Millisecond)
	close(stop)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not stop")
	}
}

// TestWatchRealProcess watches a real process through /proc: alive while
// it runs, gone once it has been killed.
func TestWatchRealProcess(t *testing.T) {
	if goruntime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Skip("cannot run sleep:", err)
	}
	defer c.Process.Kill()
	here, err := procid.Where()
	if err != nil {
		t.Fatal(err)
	}
	st, err := procid.ReadStat(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	id := procid.ID{PID: c.Process.Pid, Start: st.Start, Boot: here.Boot, NS: here.NS}
	if v := judgeLauncher(id, here, st, nil); v != launcherAlive {
		t.Fatalf("running sleep judged %d", v)
	}
	gone := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	go watchLauncher(id, here, 5*time.Millisecond, stop, procid.ReadStat, func() { close(gone) })
	select {
	case <-gone:
		t.Fatal("gone while sleep runs")
	case <-time.After(50 * time.Millisecond):
	}
	c.Process.Kill() // not reaped yet: a zombie, which counts as gone
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not notice the killed process")
	}
	c.Wait()
}
