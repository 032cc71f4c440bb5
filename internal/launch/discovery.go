package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/gohorovod/gohorovod/internal/launch/elastic"
)

// DiscoveryInterval is how often the elastic launcher runs the host
// discovery script: Horovod's DISCOVER_HOSTS_FREQUENCY_SECS (1 second),
// counted from the end of one run to the start of the next.
const DiscoveryInterval = time.Second

// DiscoveryRunTimeout bounds one run of the host discovery script: a run
// that takes longer is killed (with what it started) and counts as a
// failed discovery.
const DiscoveryRunTimeout = 30 * time.Second

// discoveryWaitDelay is how long a run that has exited (or was killed)
// may keep its output open through a process it left behind before the
// launcher stops reading: a script that starts a daemon on its own
// standard output does not hang the launcher.
const discoveryWaitDelay = time.Second

// discoveryMaxOutput caps the standard output read from one run: a host
// list is a few kilobytes.
const discoveryMaxOutput = 1 << 20

// RunDiscovery runs the host discovery script once, as horovodrun does,
// and returns what the elastic driver takes from it: elastic.Discovered
// with the hosts it printed (elastic.ParseDiscovery; a bare host gets
// slotsPerHost slots), or elastic.DiscoveryFailed.
//
// The script is the path of an executable, run directly (no shell, so a
// path with spaces works; a name without '/' is looked up on PATH), with
// the launcher's environment and directory, in its own process group. A
// script that cannot be found fails with exit code 127, one that cannot
// be executed with 126, as a shell would report them. A non-zero exit
// fails with its exit status (128+n for signal n) and the last line the
// script wrote to its standard error as Err; output that ParseDiscovery
// refuses fails with exit code 0 and the parse error. A run is bounded by
// DiscoveryRunTimeout: then its process group is killed and it fails with
// exit code -1. When ctx ends first, the run is killed the same way and
// fails with exit code -1 and ctx's error.
func RunDiscovery(ctx context.Context, script string, slotsPerHost int) elastic.Event {
	return runDiscovery(ctx, script, slotsPerHost, DiscoveryRunTimeout)
}

func runDiscovery(ctx context.Context, script string, slotsPerHost int, timeout time.Duration) elastic.Event {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, script)
	var stdout limitedBuffer
	var stderr lastLine
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = workerProcAttr(false)
	cmd.Cancel = func() error {
		signalGroup(cmd.Process.Pid, syscall.SIGKILL)
		return cmd.Process.Kill()
	}
	cmd.WaitDelay = discoveryWaitDelay
	if err := cmd.Start(); err != nil {
		return startFailure(script, err)
	}
	err := cmd.Wait()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return elastic.DiscoveryFailed{ExitCode: -1, Err: fmt.Errorf("stopped: %w", context.Cause(ctx))}
	case rctx.Err() != nil:
		return elastic.DiscoveryFailed{ExitCode: -1, Err: fmt.Errorf("timed out after %v (killed)", timeout)}
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code := ee.ExitCode()
		detail := stderr.String()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
			if detail == "" {
				detail = fmt.Sprintf("killed by signal %d (%s)", int(ws.Signal()), SignalName(int(ws.Signal())))
			}
		}
		var derr error
		if detail != "" {
			derr = errors.New(detail)
		}
		return elastic.DiscoveryFailed{ExitCode: code, Err: derr}
	case errors.Is(err, exec.ErrWaitDelay):
		// The script exited 0 and left a process holding its output open:
		// what the script printed has been read.
	case err != nil:
		return elastic.DiscoveryFailed{ExitCode: -1, Err: err}
	}
	if stdout.over {
		return elastic.DiscoveryFailed{ExitCode: 0, Err: fmt.Errorf("printed more than %d bytes; want one host per line", discoveryMaxOutput)}
	}
	hosts, err := elastic.ParseDiscovery(stdout.String(), slotsPerHost)
	if err != nil {
		return elastic.DiscoveryFailed{ExitCode: 0, Err: err}
	}
	return elastic.Discovered{Hosts: hosts}
}

// startFailure is a script that could not be started, with a shell's exit
// code: 127 when it is not there, 126 when it cannot be executed.
func startFailure(script string, err error) elastic.DiscoveryFailed {
	if errors.Is(err, exec.ErrNotFound) {
		return elastic.DiscoveryFailed{ExitCode: 127, Err: errors.New("not found on PATH (give the script's path, e.g. ./" + script + ")")}
	}
	if errors.Is(err, exec.ErrDot) {
		return elastic.DiscoveryFailed{ExitCode: 127, Err: errors.New("found only relative to the current directory through PATH (give the script's path, e.g. ./" + script + ")")}
	}
	st, serr := os.Stat(script)
	switch {
	case errors.Is(err, fs.ErrNotExist) && serr != nil:
		return elastic.DiscoveryFailed{ExitCode: 127, Err: errors.New("no such file")}
	case errors.Is(err, fs.ErrNotExist):
		return elastic.DiscoveryFailed{ExitCode: 127, Err: errors.New("its interpreter (the #! line) was not found")}
	case serr == nil && st.IsDir():
		return elastic.DiscoveryFailed{ExitCode: 126, Err: errors.New("is a directory")}
	case errors.Is(err, fs.ErrPermission):
		return elastic.DiscoveryFailed{ExitCode: 126, Err: errors.New("not executable (chmod +x it)")}
	case errors.Is(err, syscall.ENOEXEC):
		return elastic.DiscoveryFailed{ExitCode: 126, Err: errors.New("not a program the system can run (a script needs a #! line, e.g. #!/bin/sh)")}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the script's name is in the caller's message
	}
	return elastic.DiscoveryFailed{ExitCode: 126, Err: fmt.Errorf("cannot run it: %w", err)}
}

// limitedBuffer keeps the first discoveryMaxOutput bytes written to it and
// notes whether there were more.
type limitedBuffer struct {
	bytes.Buffer
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := discoveryMaxOutput - b.Len(); len(p) > room {
		b.over = true
		b.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// lastLine keeps the last non-blank line written to it (at most 1 KiB of
// it).
type lastLine struct {
	cur  []byte // the line being written
	last string // the last complete non-blank line
}

const lastLineMax = 1 << 10

func (l *lastLine) Write(p []byte) (int, error) {
	for _, c := range p {
		if c == '\n' {
			l.end()
			continue
		}
		if len(l.cur) < lastLineMax {
			l.cur = append(l.cur, c)
		}
	}
	return len(p), nil
}

func (l *lastLine) end() {
	if s := strings.TrimSpace(string(l.cur)); s != "" {
		l.last = s
	}
	l.cur = l.cur[:0]
}

// String is the last non-blank line, the unfinished one included.
func (l *lastLine) String() string {
	l.end()
	return l.last
}
