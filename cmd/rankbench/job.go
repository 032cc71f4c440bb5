package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// spec is one job: its launcher commands (one per emulated node, else
// one), whose first prints rank 0's output, and the program whose
// processes are its ranks.
type spec struct {
	argvs   [][]string
	env     []string // added to this process's environment
	program string   // absolute path
	np      int
	timeout time.Duration
	// minAvail: the job is killed when the machine's available memory
	// falls below it (a full /dev/shm is memory).
	minAvail int64
}

// observed is what running one job saw.
type observed struct {
	out                        []string // rank 0's lines, without the launcher's tag
	launch, holdBegin, holdEnd time.Time
	exit                       time.Time
	ranks                      []procSample // every rank, in the hold
	shmHeld                    int64        // distinct shared-memory bytes the job mapped, in the hold
	launchers                  map[int]procSample
	jobCPU                     float64 // the launchers' rusage: their own and their waited-for children's CPU
	pids                       []int   // every process of the job seen
	leftovers                  []string
	killed                     string // why rankbench killed the job, if it did
	stderr                     string // the launchers' standard error, the tail
	hold, sampled              bool   // the hold began; the ranks were sampled in it
	mu                         sync.Mutex
}

// tagged is the prefix the launchers put on a worker's lines.
var tagged = regexp.MustCompile(`^\[\d+,\d+\]<std(out|err)>:`)

// runJob runs s, samples the ranks when rank 0 says hold=begin, ends the
// hold, and checks the scratch directories afterwards.
func runJob(s spec) (*observed, error) {
	before := snapshot()
	tmp, err := os.MkdirTemp("", "rankbench-")
	if err != nil {
		return nil, err
	}
	holdFile := filepath.Join(tmp, "stop")
	o := &observed{launchers: make(map[int]procSample)}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	cmds, stdout, stderr, err := startAll(ctx, s, holdFile, o)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	roots := make([]int, len(cmds))
	for i, c := range cmds {
		roots[i] = c.Process.Pid
	}
	holding := make(chan struct{})
	lines := make(chan struct{})
	go func() { defer close(lines); o.read(stdout, holding) }()
	stopWatch := o.watch(roots, s, cancel)
	select {
	case <-holding:
		o.sampleRanks(roots, s.program)
	case <-lines:
	case <-ctx.Done():
	}
	o.holdEnd = time.Now()
	os.WriteFile(holdFile, nil, 0o600)
	<-lines
	waitErr := waitAll(cmds, o)
	o.exit = time.Now()
	stopWatch()
	o.stderr = tail(stderr.String(), 3000)
	os.RemoveAll(tmp)
	o.leftovers = settle(before, o.pids)
	if o.killed != "" {
		return o, errors.New(o.killed)
	}
	if ctx.Err() != nil {
		return o, fmt.Errorf("timed out after %v", s.timeout)
	}
	return o, waitErr
}

// startAll starts the launchers, each in a process group of its own, and
// returns them with the first's standard output and their standard error.
func startAll(ctx context.Context, s spec, holdFile string, o *observed) ([]*exec.Cmd, io.Reader, *syncBuffer, error) {
	stderr := &syncBuffer{}
	var cmds []*exec.Cmd
	var stdout io.Reader
	o.launch = time.Now()
	for i, argv := range s.argvs {
		argv = append(append([]string(nil), argv...), "--hold-file", holdFile)
		c := exec.CommandContext(ctx, argv[0], argv[1:]...)
		c.Env = append(os.Environ(), s.env...)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
		c.WaitDelay = 10 * time.Second
		c.Stderr = stderr
		if i == 0 {
			p, err := c.StdoutPipe()
			if err != nil {
				return nil, nil, nil, err
			}
			stdout = p
		} else {
			c.Stdout = io.Discard
		}
		if err := c.Start(); err != nil {
			for _, c := range cmds {
				c.Cancel()
				c.Wait()
			}
			return nil, nil, nil, err
		}
		cmds = append(cmds, c)
	}
	return cmds, stdout, stderr, nil
}

// read keeps rank 0's lines and closes holding at its hold=begin.
func (o *observed) read(r io.Reader, holding chan struct{}) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := tagged.ReplaceAllString(sc.Text(), "")
		if line == "hold=begin" && !o.hold {
			o.hold, o.holdBegin = true, time.Now()
			close(holding)
		}
		o.out = append(o.out, line)
	}
	io.Copy(io.Discard, r)
}

// sampleRanks waits a little for the hold to settle, then reads every
// rank's /proc entry and the shared memory the job maps.
func (o *observed) sampleRanks(roots []int, program string) {
	time.Sleep(200 * time.Millisecond)
	all := descendants(roots)
	var ranks []int
	for _, p := range all {
		if exe(p) == program {
			ranks = append(ranks, p)
		}
	}
	for _, p := range ranks {
		if s, err := readSample(p); err == nil {
			o.ranks = append(o.ranks, s)
		}
	}
	o.shmHeld = shmHeld(all)
	o.sampled = true
	o.mu.Lock()
	o.pids = appendNew(o.pids, all...)
	o.mu.Unlock()
}

// watch samples the job's processes that are not ranks (the launchers)
// every 100 ms, keeping each one's last sample, and kills the job when the
// machine's available memory falls below s.minAvail. The returned function
// stops it.
func (o *observed) watch(roots []int, s spec, cancel func()) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			all := descendants(roots)
			o.mu.Lock()
			o.pids = appendNew(o.pids, all...)
			o.mu.Unlock()
			for _, p := range all {
				if exe(p) == s.program {
					continue
				}
				if smp, err := readSample(p); err == nil {
					o.mu.Lock()
					o.launchers[p] = latest(o.launchers[p], smp)
					o.mu.Unlock()
				}
			}
			if a := memAvailable(); a >= 0 && a < s.minAvail && o.killed == "" {
				o.killed = fmt.Sprintf("killed by rankbench: the machine had %d MiB of memory left (-min-avail %d MiB; /dev/shm is memory)",
					a>>20, s.minAvail>>20)
				killAll(all)
				cancel()
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// latest merges a launcher's new sample into its last: the peak resident
// set and the CPU time only grow, and a process that is exiting (a
// zombie's status has no memory lines) reads as zero.
func latest(last, s procSample) procSample {
	s.hwmKiB = max(s.hwmKiB, last.hwmKiB)
	s.cpuSec = max(s.cpuSec, last.cpuSec)
	return s
}

// killAll sends SIGKILL to every process of pids.
func killAll(pids []int) {
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGKILL)
	}
}

// waitAll waits for the launchers and adds up their CPU (their rusage
// counts the children they waited for: the ranks too).
func waitAll(cmds []*exec.Cmd, o *observed) error {
	var first error
	for i, c := range cmds {
		err := c.Wait()
		if err != nil && first == nil {
			first = fmt.Errorf("launcher %d (%s): %w", i, filepath.Base(c.Path), err)
		}
		if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok {
			o.jobCPU += float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
		}
	}
	return first
}

// settle gives the job's files a moment to go (a launcher's last
// clean-up may still run when it has exited) and returns what is left.
func settle(before map[string]bool, pids []int) []string {
	var left []string
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left = leftovers(before, snapshot(), pids)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
	}
}

func appendNew(xs []int, ys ...int) []int {
	have := make(map[int]bool, len(xs))
	for _, x := range xs {
		have[x] = true
	}
	for _, y := range ys {
		if !have[y] {
			have[y] = true
			xs = append(xs, y)
		}
	}
	return xs
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// syncBuffer is a bytes.Buffer that several launchers write at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Clone(b.b.String())
}
