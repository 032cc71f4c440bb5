package runtime

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/internal/job/rendezvous/rendezvoustest"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// glooJob starts a rendezvous server for the slots and returns each slot's
// configuration, as gohorovodrun --gloo would set it in the environment.
func glooJob(t *testing.T, slots []rendezvous.Slot) []config.Config {
	return rendezvoustest.Job(t, testConfig(), slots)
}

// TestInitEmbedded: three workers on two "hosts" started with the embedded
// transport's environment (no communicator given) find each other through
// the rendezvous, get Horovod's placement, and reduce.
func TestInitEmbedded(t *testing.T) {
	slots := []rendezvous.Slot{{Host: "127.0.0.1", LocalRank: 0}, {Host: "localhost", LocalRank: 0}, {Host: "localhost", LocalRank: 1}}
	cfgs := glooJob(t, slots)
	n := len(slots)
	rts := make([]*Runtime, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range rts {
		rts[i] = new(Runtime)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = rts[i].Init(WithConfig(cfgs[i]), WithLogger(zerolog.Nop()))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	defer func() {
		var wg sync.WaitGroup
		for _, r := range rts {
			wg.Add(1)
			go func() { defer wg.Done(); r.Shutdown() }()
		}
		wg.Wait()
	}()
	// Horovod's placement for hosts [127.0.0.1:1, localhost:2].
	want := [][4]int{{0, 1, 0, 2}, {0, 2, 1, 2}, {1, 2, 0, 1}} // local rank, local size, cross rank, cross size
	for i, r := range rts {
		got := [4]int{r.LocalRank(), r.LocalSize(), r.CrossRank(), r.CrossSize()}
		if r.Rank() != i || r.Size() != n || got != want[i] {
			t.Errorf("worker %d: rank %d of %d, placement %v, want %v", i, r.Rank(), r.Size(), got, want[i])
		}
		if r.MPIEnabled() {
			t.Errorf("worker %d reports MPI", i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs = make([]error, n)
	for i, r := range rts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for step := 0; step < 5; step++ {
				v := fill(tensor.Float32, 1000, float64(i))
				if err := r.AllreduceInPlace(ctx, v, "g", Sum); err != nil {
					errs[i] = err
					return
				}
				if v.Float32s()[999] != 3 {
					errs[i] = fmt.Errorf("sum %v", v.Float32s()[999])
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
}
