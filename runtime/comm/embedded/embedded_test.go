package embedded_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/runtime/comm/embedded"
)

// group makes a local group and closes it at the end of the test.
func group(t testing.TB, n int, o embedded.GroupOptions) []comm.Communicator {
	t.Helper()
	cs, err := embedded.NewLocalGroup(n, o)
	if err != nil {
		t.Fatalf("NewLocalGroup(%d): %v", n, err)
	}
	t.Cleanup(func() { closeAll(t, cs) })
	return cs
}

func closeAll(t testing.TB, cs []comm.Communicator) {
	t.Helper()
	for r, c := range cs {
		if err := c.Close(); err != nil {
			t.Errorf("rank %d: Close: %v", r, err)
		}
	}
}

// checkGoroutines fails the test if goroutines started during it are still
// running shortly after it ends.
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if now := runtime.NumGoroutine(); now > before {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines before, %d after:\n%s", before, now, buf[:runtime.Stack(buf, true)])
		}
	})
}

func TestConformance(t *testing.T) {
	for _, unix := range []bool{false, true} {
		for _, n := range []int{2, 3, 4} {
			name := fmt.Sprintf("tcp/np%d", n)
			if unix {
				name = fmt.Sprintf("unix/np%d", n)
			}
			t.Run(name, func(t *testing.T) {
				checkGoroutines(t)
				cs := group(t, n, embedded.GroupOptions{Unix: unix})
				commtest.RunGroup(t, cs)
			})
		}
	}
}

// TestConformanceCheckOff runs the value cases with the agreement check off,
// as the runtime runs its negotiated collectives.
func TestConformanceCheckOff(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("np%d", n), func(t *testing.T) {
			checkGoroutines(t)
			cs := group(t, n, embedded.GroupOptions{Unix: n%2 == 0})
			for _, c := range cs {
				c.(comm.AgreementChecker).SetCheck(false)
			}
			for _, tc := range commtest.Cases() {
				if strings.HasPrefix(tc.Name, "error/") || n < tc.MinRanks {
					continue
				}
				errs := make([]error, n)
				var wg sync.WaitGroup
				for r, c := range cs {
					wg.Go(func() { errs[r] = tc.Run(c) })
				}
				wg.Wait()
				for r, err := range errs {
					if err != nil {
						t.Errorf("%s, rank %d: %v", tc.Name, r, err)
					}
				}
			}
		})
	}
}
