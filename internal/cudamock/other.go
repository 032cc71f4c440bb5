//go:build !(linux && (amd64 || arm64)) || nogpu

package cudamock

import "testing"

// Without purego's dlopen (another platform, or the nogpu tag) the mock
// libraries cannot be loaded: these skip the test.

// Counts skips t.
func Counts(t testing.TB, cudart string) [5]int64 { t.Skip("no dlopen"); return [5]int64{} }

// FailCopy skips t.
func FailCopy(t testing.TB, cudart string, kind, nth, code int) { t.Skip("no dlopen") }

// Source skips t.
func Source(t testing.TB, path string) string { t.Skip("no dlopen"); return "" }

// RefuseBatch skips t.
func RefuseBatch(t testing.TB, cudart string, code int) { t.Skip("no dlopen") }

// DriverCounts skips t.
func DriverCounts(t testing.TB, path string) [6]int64 { t.Skip("no dlopen"); return [6]int64{} }

// FailLaunch skips t.
func FailLaunch(t testing.TB, path string, code int) { t.Skip("no dlopen") }

// BreakKernel skips t.
func BreakKernel(t testing.TB, path string, mask int) { t.Skip("no dlopen") }
