package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/optim/preempt"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

// preemptible is train's loop, stopping when told to (optim/preempt): at
// every step boundary it calls Check; when the ranks agree to stop, its
// checkpoint writes DIR/<rank>.ckpt with the step, it prints "rank R
// preempted after step S" and exits with preempt.ExitStatus.
func preemptible(dir string) int {
	return trainLoop(dir, 1<<10, func(r int) (func(int) (int, bool), int) {
		coll, err := optim.FromRuntime(hvd.Default())
		if err != nil {
			fmt.Fprintf(os.Stderr, "worker %d: %v\n", r, err)
			return nil, 4
		}
		w, err := preempt.Watch(coll, preempt.Options{Grace: 20 * time.Second})
		if err != nil {
			fmt.Fprintf(os.Stderr, "worker %d: %v\n", r, err)
			return nil, 4
		}
		return func(step int) (int, bool) {
			err := w.Check(func() error {
				return os.WriteFile(filepath.Join(dir, strconv.Itoa(r)+".ckpt"), []byte(strconv.Itoa(step)), 0o644)
			})
			if err != nil {
				fmt.Printf("rank %d preempted after step %d\n", r, step)
				w.Close()
				hvd.Shutdown()
				return preempt.ExitCode(err), true
			}
			time.Sleep(5 * time.Millisecond)
			return 0, false
		}, 0
	})
}
