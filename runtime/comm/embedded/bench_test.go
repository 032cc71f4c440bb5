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
	benchGroup(b, n, size, unix, func(r int, c comm.Communicator, buf, _ *tensor.Tensor) error {
		return c.Allreduce(buf, tensor.Sum)
	})
}

// BenchmarkExchange swaps float32 buffers of 1 MiB and 64 MiB between the
// pairs of decentralized SGD's ShiftOne (comm.Exchange, each rank with one
// peer) at np 2 and 4 over Unix sockets, beside an allreduce of the same
// buffer (BenchmarkAllreduce's): the exchange moves the buffer once per
// rank whatever the size of the group, a ring allreduce 2(n-1)/n times.
// SetBytes is the buffer size.
func BenchmarkExchange(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, size := range []int{1 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("exchange/np%d/%s", n, human(size)), func(b *testing.B) {
				benchGroup(b, n, size, true, func(r int, c comm.Communicator, buf, recv *tensor.Tensor) error {
					p := r ^ 1 // ShiftOne's first pairs, (0,2) and (1,3), differ only in who: the cost is one peer each
					return comm.Exchange(c, buf, p, recv, p)
				})
			})
			b.Run(fmt.Sprintf("allreduce/np%d/%s", n, human(size)), func(b *testing.B) {
				benchAllreduce(b, n, size, true)
			})
		}
	}
}

// benchGroup runs call on every rank of a local group of n, b.N times, on
// a buffer of size bytes (and a receive buffer of as many), with the
// agreement check off (as the runtime runs its collectives).
func benchGroup(b *testing.B, n, size int, unix bool, call func(r int, c comm.Communicator, buf, recv *tensor.Tensor) error) {
	cs, err := embedded.NewLocalGroup(n, embedded.GroupOptions{Unix: unix})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	bufs, recvs := make([]*tensor.Tensor, n), make([]*tensor.Tensor, n)
	for r, c := range cs {
		c.(comm.AgreementChecker).SetCheck(false)
		bufs[r], recvs[r] = tensor.New(tensor.Float32, size/4), tensor.New(tensor.Float32, size/4)
	}
	run := func(iters int) {
		var wg sync.WaitGroup
		for r, c := range cs {
			wg.Go(func() {
				for range iters {
					if err := call(r, c, bufs[r], recvs[r]); err != nil {
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

// BenchmarkAllgatherv gathers float32 blocks of equal size, size/n bytes
// from each rank, size in all, at np 4, 8 and 16 over Unix sockets, with
// each allgather algorithm forced: Bruck's (log2 n rounds), the ring (n-1
// steps) and, for reference, every rank to every other. The crossover
// between the first two sets the size up to which Allgatherv runs
// Bruck's (bruckMax). SetBytes is the total size.
func BenchmarkAllgatherv(b *testing.B) {
	for _, n := range []int{4, 8, 16} {
		for _, size := range []int{4 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 1 << 20} {
			for _, algo := range []embedded.Algorithm{embedded.Bruck, embedded.Ring, embedded.Direct} {
				b.Run(fmt.Sprintf("np%d/%s/%s", n, human(size), algo), func(b *testing.B) {
					benchAllgatherv(b, n, size, algo)
				})
			}
		}
	}
}

func benchAllgatherv(b *testing.B, n, size int, algo embedded.Algorithm) {
	counts := make([]int, n)
	sends := make([]*tensor.Tensor, n)
	for r := range counts {
		counts[r] = size / 4 / n
		sends[r] = tensor.New(tensor.Float32, counts[r])
	}
	forced := make([]bool, n)
	benchGroup(b, n, size, true, func(r int, c comm.Communicator, _, recv *tensor.Tensor) error {
		if !forced[r] {
			forced[r] = true
			if err := c.(*embedded.Comm).SetAlgorithms(embedded.Algorithms{Allgather: algo}); err != nil {
				return err
			}
		}
		return c.Allgatherv(sends[r], recv, counts)
	})
}
