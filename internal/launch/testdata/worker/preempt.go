package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/optim/preempt"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// preemptible is a training loop that stops when told to (optim/preempt):
// it writes DIR/<rank>.pid, prints "training R pid P" after the first
// steps, and at every step boundary Check; when the ranks agree to stop,
// its checkpoint writes DIR/<rank>.ckpt with the step, it prints "rank R
// preempted after step S" and exits with preempt.ExitStatus. It gives up
// (exit 6) after two minutes.
func preemptible(dir string) int {
	if err := hvd.Init(); err != nil {
		fmt.Fprintf(os.Stderr, "worker: hvd.Init: %v\n", err)
		return 4
	}
	r := hvd.Rank()
	writePID(dir, r)
	coll, err := optim.FromRuntime(hvd.Default())
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker %d: %v\n", r, err)
		return 4
	}
	w, err := preempt.Watch(coll, preempt.Options{Grace: 20 * time.Second})
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker %d: %v\n", r, err)
		return 4
	}
	defer w.Close()
	grad := make([]float32, 1<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for step := 0; ctx.Err() == nil; step++ {
		for i := range grad {
			grad[i] = float32(r + step)
		}
		if _, err := hvd.Allreduce(ctx, tensor.FromFloat32(grad), "grad", hvd.Average); err != nil {
			fmt.Fprintf(os.Stderr, "worker %d: step %d: %v\n", r, step, err)
			return 3
		}
		if step == 10 {
			fmt.Printf("training %d pid %d\n", r, os.Getpid())
		}
		err := w.Check(func() error {
			return os.WriteFile(filepath.Join(dir, strconv.Itoa(r)+".ckpt"), []byte(strconv.Itoa(step)), 0o644)
		})
		if err != nil {
			fmt.Printf("rank %d preempted after step %d\n", r, step)
			hvd.Shutdown()
			return preempt.ExitCode(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "worker %d: still training after two minutes\n", r)
	return 6
}
