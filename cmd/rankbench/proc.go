package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procSample is what one look at /proc/PID tells of a process.
type procSample struct {
	pid      int
	rssKiB   int64 // VmRSS
	hwmKiB   int64 // VmHWM: the peak resident set
	shmemKiB int64 // RssShmem: resident shared memory (files in /dev/shm, memfds, SysV)
	threads  int
	fds      int
	sockets  int     // of the fds
	cpuSec   float64 // utime + stime
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times (100 on
// every Linux that Go supports).
const clockTick = 100

// readSample reads /proc/PID's status, stat and fd table.
func readSample(pid int) (procSample, error) {
	s := procSample{pid: pid}
	dir := "/proc/" + strconv.Itoa(pid)
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return s, err
	}
	parseStatus(string(status), &s)
	if stat, err := os.ReadFile(dir + "/stat"); err == nil {
		s.cpuSec, _ = parseStatCPU(string(stat))
	}
	fds, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return s, err
	}
	s.fds = len(fds)
	for _, fd := range fds {
		if l, err := os.Readlink(dir + "/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			s.sockets++
		}
	}
	return s, nil
}

// parseStatus takes VmRSS, VmHWM, RssShmem and Threads from the text of
// /proc/PID/status.
func parseStatus(text string, s *procSample) {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			s.rssKiB = n
		case "VmHWM":
			s.hwmKiB = n
		case "RssShmem":
			s.shmemKiB = n
		case "Threads":
			s.threads = int(n)
		}
	}
}

// parseStatCPU returns utime + stime in seconds from the text of
// /proc/PID/stat, counting fields after the last ')' (the command may
// hold spaces and parentheses).
func parseStatCPU(text string) (float64, error) {
	i := strings.LastIndexByte(text, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat: no ')'")
	}
	f := strings.Fields(text[i+1:])
	// f[0] is field 3 (state): utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("stat: times %q %q", f[11], f[12])
	}
	return float64(u+st) / clockTick, nil
}

// children returns the children of pid, from every thread's children
// file (Linux 3.5+, CONFIG_PROC_CHILDREN).
func children(pid int) []int {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// descendants returns roots and every process below them.
func descendants(roots []int) []int {
	seen := make(map[int]bool)
	var out []int
	queue := append([]int(nil), roots...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
		queue = append(queue, children(p)...)
	}
	return out
}

// exe returns the program pid runs (the target of /proc/PID/exe).
func exe(pid int) string {
	l, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return strings.TrimSuffix(l, " (deleted)")
}

// shmMapping is one mapping of a shared-memory file: /dev/shm's, or a
// memfd's.
type shmMapping struct {
	dev, inode string
	bytes      int64
}

// shmMappings returns the /dev/shm and memfd mappings in the text of
// /proc/PID/maps ("start-end perms offset dev inode path").
func shmMappings(text string) []shmMapping {
	var out []shmMapping
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !(strings.HasPrefix(f[5], "/dev/shm/") || strings.HasPrefix(f[5], "/memfd:")) {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || b < a {
			continue
		}
		out = append(out, shmMapping{dev: f[3], inode: f[4], bytes: int64(b - a)})
	}
	return out
}

// shmHeld returns the bytes of distinct shared-memory files (by device
// and inode) that the processes map, each counted once at its largest
// mapping: what the job holds in /dev/shm, the files it has unlinked
// included.
func shmHeld(pids []int) int64 {
	held := make(map[[2]string]int64)
	for _, p := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/maps")
		if err != nil {
			continue
		}
		for _, m := range shmMappings(string(b)) {
			k := [2]string{m.dev, m.inode}
			held[k] = max(held[k], m.bytes)
		}
	}
	var sum int64
	for _, b := range held {
		sum += b
	}
	return sum
}

// memAvailable returns MemAvailable from /proc/meminfo in bytes (-1
// where it cannot be read).
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(v)
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return n << 10
			}
		}
	}
	return -1
}
