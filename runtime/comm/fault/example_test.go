package fault_test

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/fault"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/tensor"
)

// Rank 1 of three fails its second allreduce as a broken link would, and
// aborts the group: the other ranks, waiting in that allreduce, learn that
// rank 1 failed and why.
func ExampleWrap() {
	group := memcomm.NewGroup(3)
	comms := make([]comm.Communicator, len(group))
	for r, c := range group {
		comms[r] = c
	}
	comms[1] = fault.Wrap(group[1], fault.Rule{
		Kind:  fault.Allreduce,
		Call:  2,
		Err:   errors.New("connection reset by peer"),
		Abort: true,
	})

	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			for step := range 3 {
				grad := []float32{float32(r)}
				if err := c.Allreduce(tensor.FromFloat32(grad), tensor.Sum); err != nil {
					errs[r] = fmt.Errorf("step %d: %w", step, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		var pe *comm.PeerError
		if errors.As(err, &pe) {
			fmt.Printf("rank %d: %v (rank %d failed)\n", r, err, pe.Rank)
		} else {
			fmt.Printf("rank %d: %v\n", r, err)
		}
	}
	// Output:
	// rank 0: step 1: comm: rank 1 failed: connection reset by peer (rank 1 failed)
	// rank 1: step 1: connection reset by peer
	// rank 2: step 1: comm: rank 1 failed: connection reset by peer (rank 1 failed)
}
