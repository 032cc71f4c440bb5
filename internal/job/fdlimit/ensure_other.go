//go:build !unix

package fdlimit

// Ensure does nothing where there is no RLIMIT_NOFILE, and reports no
// limit.
func Ensure(what string, need uint64) (Limits, error) {
	return Limits{Soft: Unlimited, Hard: Unlimited}, nil
}
