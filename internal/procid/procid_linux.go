package procid

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Where returns the observer's Here: this kernel's boot id and this
// process's pid namespace.
func Where() (Here, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return Here{}, fmt.Errorf("procid: boot id: %w", err)
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return Here{}, fmt.Errorf("procid: pid namespace: %w", err)
	}
	return Here{Boot: strings.TrimSpace(string(b)), NS: ns}, nil
}

// ReadStat reads /proc/PID/stat. An error that satisfies
// errors.Is(err, fs.ErrNotExist) means no process has that pid.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(string(b))
}

// Self returns this process's ID.
func Self() (ID, error) {
	h, err := Where()
	if err != nil {
		return ID{}, err
	}
	pid := os.Getpid()
	st, err := ReadStat(pid)
	if err != nil {
		return ID{}, fmt.Errorf("procid: %w", err)
	}
	return ID{PID: pid, Start: st.Start, Boot: h.Boot, NS: h.NS}, nil
}
