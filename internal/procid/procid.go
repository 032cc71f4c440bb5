package procid

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ID identifies one process on one host.
type ID struct {
	PID int
	// Start is the process's start time in clock ticks after boot (field
	// 22 of /proc/PID/stat): with PID it tells the process apart from a
	// later one given the same pid.
	Start uint64
	// Boot is the kernel's boot id (/proc/sys/kernel/random/boot_id):
	// different on another host, and after a reboot.
	Boot string
	// NS is the process's pid namespace (the target of /proc/PID/ns/pid,
	// e.g. "pid:[4026531836]"): a container on the same kernel has its
	// own, where the same pid means another process.
	NS string
}

// IsZero reports whether id names no process.
func (id ID) IsZero() bool { return id == ID{} }

// String writes id as "PID:START:BOOT:NS", the form Parse reads; the zero
// ID is "".
func (id ID) String() string {
	if id.IsZero() {
		return ""
	}
	return fmt.Sprintf("%d:%d:%s:%s", id.PID, id.Start, id.Boot, id.NS)
}

// Parse reads String's form. "" is the zero ID.
func Parse(s string) (ID, error) {
	if s == "" {
		return ID{}, nil
	}
	// The namespace ("pid:[4026531836]") contains a colon itself: split
	// off the first three fields only.
	f := strings.SplitN(s, ":", 4)
	if len(f) != 4 || f[2] == "" || f[3] == "" {
		return ID{}, fmt.Errorf("procid: %q is not PID:START:BOOT:NS", s)
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return ID{}, fmt.Errorf("procid: %q: bad pid %q", s, f[0])
	}
	start, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return ID{}, fmt.Errorf("procid: %q: bad start time %q", s, f[1])
	}
	return ID{PID: pid, Start: start, Boot: f[2], NS: f[3]}, nil
}

// Here is where an observer runs: its kernel's boot id and its pid
// namespace.
type Here struct {
	Boot, NS string
}

// Sees reports whether an observer here can look id's process up by its
// pid: the same kernel and the same pid namespace.
func (h Here) Sees(id ID) bool {
	return h.Boot != "" && h.Boot == id.Boot && h.NS != "" && h.NS == id.NS
}

// Stat is what ParseStat takes from /proc/PID/stat.
type Stat struct {
	State byte   // R, S, D, Z (zombie), X (dead), ...
	Start uint64 // start time in clock ticks after boot
}

// Exited reports whether the process has ended (a zombie that its parent
// has not reaped yet counts as ended).
func (s Stat) Exited() bool { return s.State == 'Z' || s.State == 'X' }

// ErrBadStat is wrapped by ParseStat's errors.
var ErrBadStat = errors.New("procid: malformed /proc/PID/stat")

// ParseStat reads the state and the start time from the text of
// /proc/PID/stat: "PID (COMM) STATE PPID ... STARTTIME ...". COMM may
// contain spaces and parentheses, so the fields are counted from the last
// ')'.
func ParseStat(text string) (Stat, error) {
	i := strings.LastIndexByte(text, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("%w: no ')'", ErrBadStat)
	}
	f := strings.Fields(text[i+1:])
	// f[0] is field 3 (state), so field 22 (starttime) is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("%w: %d fields after the command", ErrBadStat, len(f))
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("%w: start time %q", ErrBadStat, f[19])
	}
	return Stat{State: f[0][0], Start: start}, nil
}
