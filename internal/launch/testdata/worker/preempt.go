package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/optim/preempt"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

// preemptible is train's loop, stopping when told to (optim/preempt): at
// every step boundary it calls Check; when the ranks agree to stop, its
// checkpoint writes DIR/<rank>.ckpt with the step, it prints "rank R
// preempted after step S" and exits with preempt.ExitStatus; rank 0 also
// writes the step to DIR/last. Every rank that finds DIR/last at start
// prints "rank R resumed from step S" and goes on from the next step. With steps > 0,
// the ranks print "rank R finished at step S" after step steps-1 and exit
// with 0.
func preemptible(dir string, steps int) int {
	last := filepath.Join(dir, "last")
	return trainWith(dir, allreduceStep(1<<10), func(r int) (func(int) (int, bool), int) {
		ckpt := filepath.Join(dir, strconv.Itoa(r)+".ckpt")
		from := 0
		if b, err := os.ReadFile(last); err == nil {
			step, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				fmt.Fprintf(os.Stderr, "worker %d: checkpoint %s: %v\n", r, last, err)
				return nil, 5
			}
			fmt.Printf("rank %d resumed from step %d\n", r, step)
			from = step + 1
		}
		save := func(step int) error {
			if r == 0 {
				if err := writeAtomic(last, step); err != nil {
					return err
				}
			}
			return writeAtomic(ckpt, step)
		}
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
		end := func(code int) (int, bool) {
			w.Close()
			hvd.Shutdown()
			return code, true
		}
		return func(local int) (int, bool) {
			step := from + local
			err := w.Check(func() error { return save(step) })
			switch {
			case err != nil:
				fmt.Printf("rank %d preempted after step %d\n", r, step)
				return end(preempt.ExitCode(err))
			case steps > 0 && step >= steps-1:
				fmt.Printf("rank %d finished at step %d\n", r, step)
				return end(0)
			}
			time.Sleep(5 * time.Millisecond)
			return 0, false
		}, 0
	})
}

// writeAtomic writes step to path through a temporary file and a rename,
// so that a process killed meanwhile leaves the old value or the new one.
func writeAtomic(path string, step int) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(step)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
