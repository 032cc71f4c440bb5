package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/internal/sockdir"
)

// squat makes, at the name Listen will give its next Unix socket in dir,
// what another local user could make in a shared folder: a directory
// with a file in it, which Listen cannot remove.
func squat(t *testing.T, dir string, ahead uint64) string {
	t.Helper()
	p := filepath.Join(dir, fmt.Sprintf("ghv-%d-%d.sock", os.Getpid(), sockSeq.Load()+ahead))
	if err := os.MkdirAll(filepath.Join(p, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestListenPrivateSquatter: a file made in advance at the predictable
// name in the shared temporary folder breaks a Unix socket there (as Init
// did when it listened in os.TempDir()), and cannot break ListenPrivate,
// whose directory nobody else can have made.
func TestListenPrivateSquatter(t *testing.T) {
	tmp := shortDir(t)
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("TMPDIR", tmp)
	squat(t, tmp, 1)
	if l, err := Listen("local", "127.0.0.1:0", tmp); err == nil {
		l.Close()
		t.Fatal("Listen in the shared folder succeeded beside a squatter; the test does not reproduce the attack")
	}
	squat(t, tmp, 1)
	l, err := ListenPrivate("local", "127.0.0.1:0", "")
	if err != nil {
		t.Fatalf("ListenPrivate beside a squatter: %v", err)
	}
	path := l.Peer().Unix
	dir := filepath.Dir(path)
	if filepath.Dir(dir) != tmp || !strings.HasPrefix(filepath.Base(dir), "ghv-") {
		t.Errorf("socket %s, want it in a ghv-* directory of $TMPDIR %s", path, tmp)
	}
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("socket directory %s has mode %v, want 0700", dir, st.Mode().Perm())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Close left the private directory %s (%v)", dir, err)
	}
}

// TestListenPrivateJobDir: a directory the launcher made is used as it
// is, and kept by Close (the launcher removes it); one that does not exist
// here (a remote host) gives a private directory of the process's own.
func TestListenPrivateJobDir(t *testing.T) {
	tmp := shortDir(t)
	t.Setenv("XDG_RUNTIME_DIR", tmp)
	job := filepath.Join(tmp, "job")
	if err := os.Mkdir(job, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := ListenPrivate("local", "127.0.0.1:0", job)
	if err != nil {
		t.Fatal(err)
	}
	if got := filepath.Dir(l.Peer().Unix); got != job {
		t.Errorf("socket in %s, want the job's directory %s", got, job)
	}
	l.Close()
	if _, err := os.Stat(job); err != nil {
		t.Errorf("Close removed the launcher's directory: %v", err)
	}
	if ents, _ := os.ReadDir(job); len(ents) != 0 {
		t.Errorf("Close left %d entries in the job's directory", len(ents))
	}
	l, err = ListenPrivate("local", "127.0.0.1:0", filepath.Join(tmp, "elsewhere"))
	if err != nil {
		t.Fatal(err)
	}
	own := filepath.Dir(l.Peer().Unix)
	if filepath.Dir(own) != tmp {
		t.Errorf("socket in %s, want a private directory under $XDG_RUNTIME_DIR %s", own, tmp)
	}
	l.Close()
	if _, err := os.Stat(own); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Close left the private directory %s", own)
	}
}

// TestListenPrivateCleansDeadDirs: a private directory that a killed
// process left (its lock file free, its socket still there) is removed
// when the next process makes its own; one whose lock a live process
// holds is kept.
func TestListenPrivateCleansDeadDirs(t *testing.T) {
	tmp := shortDir(t)
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("TMPDIR", tmp)
	dead := filepath.Join(tmp, "ghv-123")
	if err := os.Mkdir(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dead, sockdir.LockName), nil, 0o600)
	squat(t, dead, 1)
	live, err := ListenPrivate("local", "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead process's directory %s is still there (%v)", dead, err)
	}
	next, err := ListenPrivate("local", "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := os.Stat(live.Peer().Unix); err != nil {
		t.Errorf("the next ListenPrivate removed a live socket: %v", err)
	}
}
