//go:build unix

package fdlimit

import (
	"fmt"
	"syscall"
)

// Ensure makes sure that this process may open need descriptors for what
// (see Plan), raising its soft limit where that suffices, and returns the
// limits in force afterwards. When the hard limit is too low it changes
// nothing and returns a *LimitError.
func Ensure(what string, need uint64) (Limits, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return Limits{}, fmt.Errorf("fdlimit: getrlimit(RLIMIT_NOFILE): %w", err)
	}
	have := Limits{Soft: rl.Cur, Hard: rl.Max}
	soft, raise, err := Plan(what, need, have)
	if err != nil || !raise {
		return have, err
	}
	rl.Cur = soft
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return have, fmt.Errorf("fdlimit: raising RLIMIT_NOFILE from %d to %d for %s: %w", have.Soft, soft, what, err)
	}
	return Limits{Soft: soft, Hard: have.Hard}, nil
}
