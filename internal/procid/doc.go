// Package procid names a process so that another process can later tell
// whether it is still running: its pid, its start time, and the kernel
// (boot id) and pid namespace the pid belongs to. A pid alone is not
// enough: pids are reused, and a pid means nothing on another host or in
// another pid namespace.
//
// gohorovodrun writes its own ID into the workers' environment
// (GOHOROVOD_LAUNCHER, runtime/config); the runtime in each worker reads
// it and exits when the launcher is gone (runtime/internal/transport/guard.go). Parse and
// String are exact inverses; ParseStat and Here.Sees are pure; Self, Where
// and ReadStat read /proc (Linux only).
package procid
