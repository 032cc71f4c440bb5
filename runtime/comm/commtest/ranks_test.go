package commtest_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/tensor"
)

// TestOnRanks: every rank runs at once (a collective completes only then),
// each error lands at its rank's index, and a panic becomes an error.
func TestOnRanks(t *testing.T) {
	g := memcomm.NewGroup(3)
	errs := commtest.OnRanks(g, func(c comm.Communicator) error {
		v := []int64{int64(c.Rank())}
		if err := c.Allreduce(tensor.FromInt64(v), tensor.Sum); err != nil {
			return err
		}
		switch c.Rank() {
		case 1:
			return errors.New("one")
		case 2:
			panic("two")
		}
		if v[0] != 3 {
			return errors.New("wrong sum")
		}
		return nil
	})
	if len(errs) != 3 || errs[0] != nil || errs[1] == nil || errs[1].Error() != "one" ||
		errs[2] == nil || !strings.Contains(errs[2].Error(), "panic: two") {
		t.Errorf("errors %v, want [nil one panic: two]", errs)
	}
	if got := commtest.Ranks(3); len(got) != 3 || got[0] != 0 || got[2] != 2 {
		t.Errorf("Ranks(3) = %v", got)
	}
}
