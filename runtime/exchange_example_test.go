//go:build !mpi || !cgo

package runtime_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/rs/zerolog"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// Four ranks pass their tensors one step along a ring: each sends to the
// next rank and receives from the previous one.
func ExampleRuntime_Exchange() {
	ctx := context.Background()
	var mu sync.Mutex
	got := make([][]float32, 4)
	err := hvd.RunLocal(4, func(r *hvd.Runtime, rank int) error {
		n := r.Size()
		t := tensor.FromFloat32([]float32{float32(10 * rank), float32(10*rank + 1)})
		out, err := r.Exchange(ctx, t, (rank+1)%n, (rank+n-1)%n, "ring")
		if err != nil {
			return err
		}
		mu.Lock()
		got[rank] = out.Float32s()
		mu.Unlock()
		return nil
	}, hvd.WithLogger(zerolog.Nop()))
	fmt.Println(got, err)
	// Output:
	// [[30 31] [0 1] [10 11] [20 21]] <nil>
}
