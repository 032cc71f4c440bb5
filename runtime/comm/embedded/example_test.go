package embedded_test

import (
	"fmt"
	"sync"

	"github.com/gohorovod/gohorovod/runtime/comm/embedded"
	"github.com/gohorovod/gohorovod/tensor"
)

// Three ranks, here goroutines of one process talking over Unix sockets,
// sum a vector.
func Example() {
	group, err := embedded.NewLocalGroup(3, embedded.GroupOptions{Unix: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	out := make([][]float32, len(group))
	var wg sync.WaitGroup
	for r, c := range group {
		wg.Go(func() {
			defer c.Close()
			v := []float32{float32(r), 1}
			if err := c.Allreduce(tensor.FromFloat32(v), tensor.Sum); err != nil {
				fmt.Println(err)
				return
			}
			out[r] = v
		})
	}
	wg.Wait()
	fmt.Println(out)
	// Output: [[3 3] [3 3] [3 3]]
}
