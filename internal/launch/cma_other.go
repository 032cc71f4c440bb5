//go:build !linux

package launch

import "errors"

// EnvCMAProbe starts a copy of the launcher as part of the cross-memory
// attach probe (Linux only).
const EnvCMAProbe = "GOHOROVOD_CMA_PROBE"

// ProbeCMA reports that cross-memory attach is a Linux mechanism.
func ProbeCMA(string) error { return errors.New("cross-memory attach is Linux only") }

// CMAProbeMain returns false: there is no probe off Linux.
func CMAProbeMain() (int, bool) { return 0, false }
