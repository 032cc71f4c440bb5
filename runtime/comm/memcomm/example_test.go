package memcomm_test

import (
	"fmt"
	"sync"

	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/tensor"
)

// Four ranks, each a goroutine with its own member of an in-memory group,
// sum their gradients; every rank ends with the same result.
func ExampleNewGroup() {
	comms := memcomm.NewGroup(4)
	results := make([][]float32, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			grad := []float32{float32(r), 10 * float32(r), 1}
			if err := c.Allreduce(tensor.FromFloat32(grad), tensor.Sum); err != nil {
				fmt.Println("rank", r, "failed:", err)
				return
			}
			results[r] = grad
		})
	}
	wg.Wait()
	for r, g := range results {
		fmt.Printf("rank %d: %v\n", r, g)
	}
	comms[0].Close() // tears down the whole group
	// Output:
	// rank 0: [6 60 4]
	// rank 1: [6 60 4]
	// rank 2: [6 60 4]
	// rank 3: [6 60 4]
}
