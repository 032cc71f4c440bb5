package embedded_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/embedded"
	"github.com/gohorovod/gohorovod/tensor"
)

// BenchmarkAllreduce reduces float32 buffers of 4 KiB, 1 MiB and 64 MiB at
// np 2 and 4, over Unix sockets and loopback TCP, with the agreement check
// off (as the runtime runs it). SetBytes is the buffer size, so the MB/s
// column is the algorithm bandwidth (bytes / time); bus bandwidth is that
// times 2(n-1)/n.
func BenchmarkAllreduce(b *testing.B) {
	for _, net := range []string{"unix", "tcp"} {
		for _, n := range []int{2, 4} {
			for _, size := range []int{4 << 10, 1 << 20, 64 << 20} {
				b.Run(fmt.Sprintf("%s/np%d/%s", net, n, human(size)), func(b *testing.B) {
					benchAllreduce(b, n, size, net == "unix")
				})
			}
		}
	}
}

func human(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	default:
		return fmt.Sprintf("%dKiB", n>>10)
	}
}

func benchAllreduce(b *testing.B, n, size int, unix bool) {
	cs, err := embedded.NewLocalGroup(n, embedded.GroupOptions{Unix: unix})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	bufs := make([]*tensor.Tensor, n)
	for r, c := range cs {
		c.(comm.AgreementChecker).SetCheck(false)
		bufs[r] = tensor.New(tensor.Float32, size/4)
	}
	run := func(iters int) {
		var wg sync.WaitGroup
		for r, c := range cs {
			wg.Go(func() {
				for range iters {
					if err := c.Allreduce(bufs[r], tensor.Sum); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	run(1) // warm up: buffers and scratch
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
}
