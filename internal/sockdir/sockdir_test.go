package sockdir

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStale(t *testing.T) {
	cases := []struct {
		name string
		s    State
		want bool
	}{
		{"lock held", State{Lock: Held, Sockets: []bool{false}}, false},
		{"lock free", State{Lock: Free, Sockets: []bool{true}, Other: 2}, true},
		{"lock free, empty", State{Lock: Free}, true},
		{"no lock, every socket's process dead", State{Sockets: []bool{false, false}}, true},
		{"no lock, one process alive", State{Sockets: []bool{false, true}}, false},
		{"no lock, empty (a maker between mkdir and lock)", State{}, false},
		{"no lock, something else inside", State{Sockets: []bool{false}, Other: 1}, false},
	}
	for _, c := range cases {
		if got := Stale(c.s); got != c.want {
			t.Errorf("%s: Stale(%+v) = %v", c.name, c.s, got)
		}
	}
}

// TestMain lets the test binary serve as a worker that makes a directory,
// listens on a socket in it, prints the directory and waits to be killed.
func TestMain(m *testing.M) {
	if base := os.Getenv("SOCKDIR_HELPER_BASE"); base != "" {
		dir, err := Make(base)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		if _, err := net.Listen("unix", filepath.Join(dir, fmt.Sprintf("ghv-%d-1.sock", os.Getpid()))); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(dir)
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helper starts a worker process that makes its directory in base.
func helper(t *testing.T, base string) (*exec.Cmd, string) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SOCKDIR_HELPER_BASE="+base)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), base) {
		t.Fatalf("the helper printed %q", sc.Text())
	}
	return cmd, sc.Text()
}

// socketFile leaves a socket file at path, as a killed process does.
func socketFile(t *testing.T, path string) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
}

func deadPid(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestCleanOnMake(t *testing.T) {
	base := t.TempDir()
	killed, killedDir := helper(t, base)
	_, liveDir := helper(t, base)
	if err := killed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed.Wait()

	// Directories of an older version, without a lock file.
	mk := func(name string, socks ...int) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		for i, pid := range socks {
			socketFile(t, filepath.Join(d, fmt.Sprintf("ghv-%d-%d.sock", pid, i)))
		}
		return d
	}
	dead := deadPid(t)
	oldDead := mk("ghv-100", dead, dead)
	oldLive := mk("ghv-200", dead, os.Getpid())
	oldEmpty := mk("ghv-300")
	oldOther := mk("ghv-400", dead)
	os.WriteFile(filepath.Join(oldOther, "notes"), []byte("x"), 0o600)
	notOurs := mk("other-500", dead)
	os.Symlink(oldDead, filepath.Join(base, "ghv-link"))

	mine, err := Make(base)
	if err != nil {
		t.Fatal(err)
	}
	defer Remove(mine)
	for _, d := range []string{killedDir, oldDead} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s, a dead process's directory, is still there (%v)", d, err)
		}
	}
	for _, d := range []string{liveDir, oldLive, oldEmpty, oldOther, notOurs, mine} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s, which is not stale, was removed: %v", d, err)
		}
	}
	// Another Make does not take this process's own live directory.
	if removed := Clean(base); slices.Contains(removed, mine) || slices.Contains(removed, liveDir) {
		t.Errorf("Clean removed a live directory: %v", removed)
	}
	if err := Remove(mine); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mine); !os.IsNotExist(err) {
		t.Errorf("Remove left %s", mine)
	}
}

func TestMakeInMissingBase(t *testing.T) {
	if _, err := Make(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("Make in a base that does not exist succeeded")
	}
}
