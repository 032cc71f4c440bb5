package preempt

import (
	"io"
	"os"
	"testing"

	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

// BenchmarkCheck measures what Check adds to every training step when no
// rank was told to stop: one allreduce of one number, over an in-process
// job of 2 and 4 ranks (ns/op is one step boundary on every rank).
func BenchmarkCheck(b *testing.B) {
	for _, n := range []int{2, 4} {
		b.Run(map[int]string{2: "np2", 4: "np4"}[n], func(b *testing.B) {
			b.ReportAllocs()
			err := hvd.RunLocal(n, func(r *hvd.Runtime, rank int) error {
				coll, err := optim.FromRuntime(r)
				if err != nil {
					return err
				}
				w, err := Watch(coll, Options{Signals: []os.Signal{}, Log: io.Discard})
				if err != nil {
					return err
				}
				defer w.Close()
				if rank == 0 {
					b.ResetTimer()
				}
				for i := 0; i < b.N; i++ {
					if err := w.Check(nil); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}
