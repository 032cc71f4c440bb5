package launch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// EnvCMAProbe starts a copy of the launcher as one of the two processes of
// the cross-memory attach probe (ProbeCMA): "hold" or "read PID ADDR LEN".
const EnvCMAProbe = "GOHOROVOD_CMA_PROBE"

// cmaPattern fills the probe's buffer.
func cmaPattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

const cmaProbeBytes = 1 << 16

// ProbeCMA reports whether Open MPI's single-copy mechanism, cross-memory
// attach (process_vm_readv), works between two processes of this machine
// started the way mpirun starts ranks: as siblings, not parent and child.
// It starts exe (this launcher; its main runs CMAProbeMain through
// GuardMain) twice: one holds a buffer and allows any process to attach
// (as Open MPI's shared-memory transport does), the other reads it. A nil
// error means the read returned the buffer; otherwise the error says why
// not (Yama's ptrace scope, a seccomp profile that forbids the call, no
// CAP_SYS_PTRACE across users, ...).
func ProbeCMA(exe string) error {
	hold := exec.Command(exe)
	hold.Env = append(os.Environ(), EnvCMAProbe+"=hold")
	stdin, err := hold.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := hold.StdoutPipe()
	if err != nil {
		return err
	}
	var holdErr bytes.Buffer
	hold.Stderr = &holdErr
	if err := hold.Start(); err != nil {
		return fmt.Errorf("cross-memory attach probe: %w", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		stdin.Close() // the holder exits at end-of-file
		done := make(chan struct{})
		go func() { hold.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			hold.Process.Kill()
			<-done
		}
	}
	defer stop()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop() // holdErr is complete (and no longer written) once the holder is reaped
		return fmt.Errorf("cross-memory attach probe: the holder did not start: %v %s", err, strings.TrimSpace(holdErr.String()))
	}
	read := exec.Command(exe)
	read.Env = append(os.Environ(), EnvCMAProbe+"=read "+strings.TrimSpace(line))
	out, err := read.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("cross-memory attach does not work here: %s%s", msg, ptraceScopeNote())
	}
	return nil
}

// ptraceScopeNote names Yama's ptrace scope when it restricts attaching.
func ptraceScopeNote() string {
	b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	if err != nil {
		return ""
	}
	v := strings.TrimSpace(string(b))
	if v == "0" {
		return ""
	}
	return fmt.Sprintf(" (kernel.yama.ptrace_scope is %s)", v)
}

// CMAProbeMain runs this process as a part of ProbeCMA when EnvCMAProbe
// is set, and returns its exit status and true; otherwise it returns
// false at once.
func CMAProbeMain() (int, bool) {
	v, ok := os.LookupEnv(EnvCMAProbe)
	if !ok {
		return 0, false
	}
	f := strings.Fields(v)
	switch {
	case len(f) == 1 && f[0] == "hold":
		buf := cmaPattern(cmaProbeBytes)
		// As Open MPI's vader does, let any process of this user attach
		// (needed where Yama's ptrace scope is 1); failing is not fatal.
		_ = unix.Prctl(unix.PR_SET_PTRACER, unix.PR_SET_PTRACER_ANY, 0, 0, 0)
		fmt.Printf("%d %d %d\n", os.Getpid(), uintptr(unsafe.Pointer(&buf[0])), len(buf))
		var b [1]byte
		for {
			if _, err := os.Stdin.Read(b[:]); err != nil {
				break
			}
		}
		runtime.KeepAlive(buf)
		return 0, true
	case len(f) == 4 && f[0] == "read":
		if err := cmaRead(f[1], f[2], f[3]); err != nil {
			fmt.Println(err)
			return 1, true
		}
		return 0, true
	}
	fmt.Fprintf(os.Stderr, "%s=%q: want hold or read PID ADDR LEN\n", EnvCMAProbe, v)
	return 2, true
}

func cmaRead(pidS, addrS, nS string) error {
	pid, err1 := strconv.Atoi(pidS)
	addr, err2 := strconv.ParseUint(addrS, 10, 64)
	n, err3 := strconv.Atoi(nS)
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("a buffer of %d bytes", n)
	}
	return cmaReadRemote(pid, uintptr(addr), n)
}

// cmaReadRemote reads n bytes at addr in process pid and checks that they
// are the holder's pattern.
func cmaReadRemote(pid int, addr uintptr, n int) error {
	got := make([]byte, n)
	local := []unix.Iovec{{Base: &got[0]}}
	local[0].SetLen(n)
	remote := []unix.RemoteIovec{{Base: addr, Len: n}}
	m, err := unix.ProcessVMReadv(pid, local, remote, 0)
	if err != nil {
		return fmt.Errorf("process_vm_readv: %w", err)
	}
	if m != n || !bytes.Equal(got, cmaPattern(n)) {
		return fmt.Errorf("process_vm_readv read %d of %d bytes, not the holder's", m, n)
	}
	return nil
}

// cmaReadAt reads buf through process_vm_readv in process pid (a test's
// own), as the probe's reader would.
func cmaReadAt(pid int, buf []byte) error {
	err := cmaReadRemote(pid, uintptr(unsafe.Pointer(&buf[0])), len(buf))
	runtime.KeepAlive(buf)
	return err
}
