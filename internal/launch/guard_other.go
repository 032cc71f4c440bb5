//go:build !linux

package launch

import (
	"errors"
	"io"
	"os"
	"os/exec"
)

// EnvGuard is set in the environment of a gohorovodrun started as the
// guard of a job (Linux only).
const EnvGuard = "GOHOROVOD_GUARD"

// GuardMain returns false: the guard needs Linux's pidfd.
func GuardMain() (int, bool) { return 0, false }

type guard struct{}

func startGuard(string, []*os.Process, []string, string, io.Writer) (*guard, error) {
	return nil, errors.New("the guard needs Linux")
}

func (g *guard) release() {}

func startLocked(cmd *exec.Cmd, _ <-chan struct{}) error { return cmd.Start() }
