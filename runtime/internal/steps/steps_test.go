package steps

import (
	"bytes"
	"sync"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
)

// TestGather: every rank gets every rank's bytes, in rank order, whatever
// their lengths (none included).
func TestGather(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		group := memcomm.NewGroup(n)
		got := make([][][]byte, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := bytes.Repeat([]byte{byte('a' + r)}, 3*r)
				got[r], errs[r] = Gather(group[r], mine)
			}()
		}
		wg.Wait()
		for r := range n {
			if errs[r] != nil {
				t.Fatalf("np %d rank %d: %v", n, r, errs[r])
			}
			for q := range n {
				want := bytes.Repeat([]byte{byte('a' + q)}, 3*q)
				if string(got[r][q]) != string(want) {
					t.Errorf("np %d: rank %d has %q from rank %d, want %q", n, r, got[r][q], q, want)
				}
			}
		}
		for _, c := range group {
			c.Close()
		}
	}
}
