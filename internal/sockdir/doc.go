// Package sockdir makes the private directories that hold gohorovod's
// Unix sockets ("ghv-" and random digits, mode 0700, under
// $XDG_RUNTIME_DIR, $TMPDIR or /tmp), and cleans up those that a dead
// process left behind.
//
// A process that is killed without warning (SIGKILL from srun, torchrun,
// a fault test, the out-of-memory killer) cannot remove its directory. So
// each directory holds a lock file that its maker keeps locked (flock) for
// as long as it lives; the kernel releases the lock when the process dies,
// however it dies. Make first removes, in the same base, every directory
// of this user whose lock is free: a dead process's. A directory whose lock
// is held belongs to a live process and is kept. A directory without a
// lock file (made by an older version) is removed only when it holds
// sockets and every one is named for a process ("ghv-PID-N.sock") that no
// longer exists; anything else in a directory keeps it.
//
// The decision is the pure function Stale; Clean gathers what it needs
// from the file system and performs it.
package sockdir
