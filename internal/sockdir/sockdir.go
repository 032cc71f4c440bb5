package sockdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Prefix starts the name of every directory Make makes.
const Prefix = "ghv-"

// LockName is the lock file in each directory.
const LockName = ".lock"

// Lock is the state of a directory's lock file.
type Lock int

const (
	// NoLock: the directory has no lock file.
	NoLock Lock = iota
	// Held: a live process holds the lock.
	Held
	// Free: the lock file is there and nobody holds it: its maker died.
	Free
)

// State is what Clean learns of one directory.
type State struct {
	Lock Lock
	// Sockets tells, for each socket named for a process
	// ("ghv-PID-N.sock"), whether that process is alive.
	Sockets []bool
	// Other counts the entries that are neither the lock file nor such a
	// socket.
	Other int
}

// Stale reports whether a directory in state s was left by a dead
// process and may be removed.
func Stale(s State) bool {
	switch s.Lock {
	case Held:
		return false
	case Free:
		return true
	}
	if s.Other > 0 || len(s.Sockets) == 0 {
		return false
	}
	for _, alive := range s.Sockets {
		if alive {
			return false
		}
	}
	return true
}

// held keeps the lock files of the directories this process made open
// (an *os.File that is no longer referenced is closed by the garbage
// collector, which would release its lock).
var held = struct {
	sync.Mutex
	m map[string]*os.File
}{m: map[string]*os.File{}}

// Make removes the stale directories in base (see Clean), then makes a new
// private directory there and locks it for the life of this process (or
// until Remove).
func Make(base string) (string, error) {
	Clean(base)
	dir, err := os.MkdirTemp(base, Prefix)
	if err != nil {
		return "", err
	}
	f, err := lockNew(dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("sockdir: locking %s: %w", dir, err)
	}
	held.Lock()
	held.m[dir] = f
	held.Unlock()
	return dir, nil
}

// lockNew makes dir's lock file, locked. It is made under another name
// and renamed into place once locked, so that no other process ever finds
// the lock file of a live directory free.
func lockNew(dir string) (*os.File, error) {
	tmp := filepath.Join(dir, LockName+"-new")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		err = os.Rename(tmp, filepath.Join(dir, LockName))
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Remove removes a directory Make made, and releases its lock.
func Remove(dir string) error {
	err := os.RemoveAll(dir)
	held.Lock()
	if f := held.m[dir]; f != nil {
		f.Close()
		delete(held.m, dir)
	}
	held.Unlock()
	return err
}

// Clean removes the stale directories ("ghv-*", of this user) in base and
// returns their paths. What it cannot read or remove it leaves.
func Clean(base string) []string {
	ents, err := os.ReadDir(base)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), Prefix) {
			continue
		}
		dir := filepath.Join(base, e.Name())
		st, release, ok := inspect(dir)
		if ok && Stale(st) && os.RemoveAll(dir) == nil {
			removed = append(removed, dir)
		}
		release()
	}
	return removed
}

// inspect reads the state of dir, a directory of this user; ok is false
// for one that is not. When the lock was free, inspect holds it until
// release, so that the directory is judged and removed under it.
func inspect(dir string) (st State, release func(), ok bool) {
	release = func() {}
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() {
		return st, release, false
	}
	if sys, isStat := fi.Sys().(*syscall.Stat_t); !isStat || int(sys.Uid) != os.Getuid() {
		return st, release, false
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return st, release, false
	}
	for _, e := range ents {
		if e.Name() == LockName {
			continue
		}
		if pid, isSock := socketPid(e); isSock {
			st.Sockets = append(st.Sockets, alive(pid))
		} else {
			st.Other++
		}
	}
	st.Lock, release = lockState(filepath.Join(dir, LockName))
	return st, release, true
}

// lockState tries the lock file at path without waiting.
func lockState(path string) (Lock, func()) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return NoLock, func() {}
	}
	if err != nil {
		return Held, func() {} // unreadable: not ours to judge
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return Held, func() {}
	}
	return Free, func() { f.Close() }
}

// socketPid reads the pid from a socket named "ghv-PID-N.sock".
func socketPid(e os.DirEntry) (int, bool) {
	if e.Type()&os.ModeSocket == 0 {
		return 0, false
	}
	name, ok := strings.CutSuffix(strings.TrimPrefix(e.Name(), Prefix), ".sock")
	pid, _, ok2 := strings.Cut(name, "-")
	n, err := strconv.Atoi(pid)
	if !ok || !ok2 || err != nil || n <= 0 || !strings.HasPrefix(e.Name(), Prefix) {
		return 0, false
	}
	return n, true
}

// alive reports whether a process with this pid exists (EPERM: it does,
// as another user's).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
