package preempt_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/optim/preempt"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

// Two ranks train; rank 1 is told to stop during step 3 (here by calling
// Signal; in a job, by SIGTERM, SIGUSR1 or SIGINT). Both stop after step
// 3, checkpoint, and would exit with status 99.
func Example() {
	stopped := make([]int, 2)
	err := hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		w, err := preempt.Watch(coll, preempt.Options{Signals: []os.Signal{}, Log: io.Discard})
		if err != nil {
			return err
		}
		defer w.Close()
		for step := 0; step < 100; step++ {
			// ... one training step ...
			if rank == 1 && step == 3 {
				w.Signal(syscall.SIGTERM)
			}
			err := w.Check(func() error { return nil /* save a checkpoint of step */ })
			if errors.Is(err, preempt.ErrPreempted) {
				stopped[rank] = step
				return nil
			} else if err != nil {
				return err
			}
		}
		return nil
	})
	fmt.Println(err, stopped, preempt.ExitCode(preempt.ErrPreempted))
	// Output: <nil> [3 3] 99
}
