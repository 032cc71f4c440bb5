package embedded_test

import (
	"testing"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/embedded"
	"github.com/gohorovod/gohorovod/tensor"
)

// TestAllreduceAllocs checks that, once warm, an allreduce allocates
// nothing per call, on the ring (large) and on recursive doubling (small),
// with the agreement check off as the runtime runs it and on: the
// per-call work (the argument check, the ring's plan and posts) reuses
// what the communicator keeps.
func TestAllreduceAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("sets up a group over sockets")
	}
	comms, err := embedded.NewLocalGroup(2, embedded.GroupOptions{Unix: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	for _, check := range []bool{false, true} {
		for _, elems := range []int{16, 1 << 18} {
			bufs := []*tensor.Tensor{tensor.New(tensor.Float32, elems), tensor.New(tensor.Float32, elems)}
			for _, c := range comms {
				c.(comm.AgreementChecker).SetCheck(check)
			}
			start, done := make(chan struct{}), make(chan error)
			go func() {
				for range start {
					done <- comms[1].Allreduce(bufs[1], tensor.Sum)
				}
			}()
			step := func() {
				start <- struct{}{}
				if err := comms[0].Allreduce(bufs[0], tensor.Sum); err != nil {
					t.Fatal(err)
				}
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				step() // warm up: the communicator grows what it keeps
			}
			allocs := testing.AllocsPerRun(20, step)
			t.Logf("check %v, %d elements: %.1f allocations", check, elems, allocs)
			close(start)
			limit := 0.0
			if check {
				limit = 3 // the agreement exchange decodes the peer's description
			}
			if allocs > limit {
				t.Errorf("check %v, %d elements: %.1f allocations per allreduce, want at most %v", check, elems, allocs, limit)
			}
		}
	}
}
