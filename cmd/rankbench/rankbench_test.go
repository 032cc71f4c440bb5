package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestParseStatus(t *testing.T) {
	var s procSample
	parseStatus("Name:\tsynthetic\nVmHWM:\t   12000 kB\nVmRSS:\t   11000 kB\nRssShmem:\t     512 kB\nThreads:\t9\n", &s)
	if s.hwmKiB != 12000 || s.rssKiB != 11000 || s.shmemKiB != 512 || s.threads != 9 {
		t.Errorf("got %+v", s)
	}
}

func TestParseStatCPU(t *testing.T) {
	// utime 150 and stime 50 ticks; the command holds ") (" and spaces.
	stat := "123 (a) (b c) S 1 123 123 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 9 0 5000 0 0"
	got, err := parseStatCPU(stat)
	if err != nil || got != 2 {
		t.Errorf("got %v, %v; want 2 s", got, err)
	}
	if _, err := parseStatCPU("123 (a) S 1"); err == nil {
		t.Error("a short stat was accepted")
	}
}

func TestShmMappings(t *testing.T) {
	maps := `7f0000000000-7f0000400000 rw-s 00000000 00:1a 1001                       /dev/shm/gohorovod-12-ab (deleted)
7f0000400000-7f0000800000 rw-s 00000000 00:1a 1002                       /dev/shm/gohorovod-13-cd (deleted)
7f0000800000-7f0000801000 rw-s 00000000 00:01 77                         /memfd:doorbell (deleted)
7f0000900000-7f0000a00000 r-xp 00000000 08:01 555                        /usr/lib/libc.so.6
7f0000a00000-7f0000b00000 rw-p 00000000 00:00 0
`
	got := shmMappings(maps)
	want := []shmMapping{{"00:1a", "1001", 4 << 20}, {"00:1a", "1002", 4 << 20}, {"00:01", "77", 4096}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestLeftovers: only the job's new entries are blamed: by pid in the name
// or in a directory's entries, or by a prefix only our jobs use.
func TestLeftovers(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "ghv123456")
	os.Mkdir(sock, 0o700)
	os.WriteFile(filepath.Join(sock, "ghv-4242-1.sock"), nil, 0o600)
	other := filepath.Join(dir, "ghv777")
	os.Mkdir(other, 0o700)
	os.WriteFile(filepath.Join(other, "ghv-999-1.sock"), nil, 0o600)
	before := map[string]bool{filepath.Join(dir, "old-4242"): true}
	after := map[string]bool{filepath.Join(dir, "old-4242"): true, filepath.Join(dir, "gohorovod-4242-beef"): true,
		sock: true, other: true, filepath.Join(dir, "gohorovod-doorbell-1"): true, filepath.Join(dir, "go-build1"): true}
	got := leftovers(before, after, []int{4242, 10})
	want := []string{filepath.Join(dir, "ghv123456"), filepath.Join(dir, "gohorovod-4242-beef"), filepath.Join(dir, "gohorovod-doorbell-1")}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestNewRow: the start-up phases come from the ranks' times and the
// launch's, the resources from the samples.
func TestNewRow(t *testing.T) {
	launch := time.UnixMicro(1_000_000_000)
	o := &observed{launch: launch, holdEnd: launch.Add(time.Second), exit: launch.Add(1500 * time.Millisecond),
		ranks:     []procSample{{rssKiB: 1024, fds: 10, sockets: 4, threads: 5}, {rssKiB: 3072, fds: 12, sockets: 6, threads: 7}},
		launchers: map[int]procSample{1: {cpuSec: 0.5, hwmKiB: 2048}}}
	base := 1_000_000_000
	for rank, t0 := range []int{10_000, 30_000} { // the ranks start 10 and 30 ms after the launch
		us := func(ms int) int { return base + t0 + ms*1000 }
		o.out = append(o.out, fmt.Sprintf("rank.%d.main_unix_us=%d", rank, us(0)), fmt.Sprintf("rank.%d.init_start_unix_us=%d", rank, us(1)),
			fmt.Sprintf("rank.%d.init_end_unix_us=%d", rank, us(100-rank*20)), fmt.Sprintf("rank.%d.first_step_unix_us=%d", rank, us(150)),
			fmt.Sprintf("rank.%d.goroutines=%d", rank, 20+rank))
	}
	o.out = append(o.out, "step_ms=2.5", "cpu_ms_per_step_per_rank=0.25", "hold=begin")
	r := newRow(2, o)
	for name, c := range map[string][2]float64{"spawn": {r.spawn, 10}, "ranks up": {r.ranksUp, 20}, "init": {r.init, 80},
		"init max": {r.initMax, 99}, "first step": {r.firstStep, 70}, "teardown": {r.teardown, 500}, "step": {r.step, 2.5},
		"rss max": {r.rssMax, 3}, "launcher CPU": {r.launcherCPU, 0.5}, "launcher RSS": {r.launcherRSS, 2}} {
		if math.Abs(c[0]-c[1]) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, c[0], c[1])
		}
	}
	if r.socketsMax != 6 || r.fdsMax != 12 || r.threadsMax != 7 || r.goMax != 21 || r.ranks != 2 {
		t.Errorf("resources %+v", r)
	}
}

func TestYardstickMedian(t *testing.T) {
	got, err := yardstickMedian("mode=whole tensors=1 bytes=40960 ranks=8 iters=200 median_ms=0.1935 min_ms=0.1813\n")
	if err != nil || got != 0.1935 {
		t.Errorf("got %v, %v", got, err)
	}
	if _, err := yardstickMedian("nothing"); err == nil {
		t.Error("no error without a median")
	}
}
