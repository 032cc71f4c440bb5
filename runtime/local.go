package runtime

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
)

// localTimeout bounds how long a rank of a local group waits for the others
// in one collective, so that a test or a program whose ranks fall out of
// step fails instead of hanging.
const localTimeout = 5 * time.Minute

// StartLocal starts n runtimes over one in-memory group (memcomm.NewGroupWith),
// one per rank, as n goroutine ranks in this process: the way to try
// multi-rank code, and to test it, without launching processes. These
// Runtimes are not the default one (see RunLocal). Init is collective, so
// the runtimes are initialised concurrently; opts are given to each (after
// the communicator, so they may not replace it). Call StopLocal with the
// result when done.
func StartLocal(n int, opts ...Option) ([]*Runtime, error) {
	if n < 1 {
		return nil, fmt.Errorf("hvd: StartLocal of %d ranks", n)
	}
	group := memcomm.NewGroupWith(n, memcomm.GroupOptions{Timeout: localTimeout})
	rts := make([]*Runtime, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		rts[i] = new(Runtime)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = rts[i].Init(append([]Option{WithCommunicator(group[i])}, opts...)...)
		}()
	}
	wg.Wait()
	if err := rankErrors(errs); err != nil {
		group[0].Close() // releases the ranks that did start, then stop them
		StopLocal(rts)
		return nil, err
	}
	return rts, nil
}

// StopLocal shuts down runtimes started by StartLocal, all at once (a rank's
// Shutdown is collective with the others), and returns the first error.
func StopLocal(rts []*Runtime) error {
	errs := make([]error, len(rts))
	var wg sync.WaitGroup
	for i, r := range rts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.Shutdown()
		}()
	}
	wg.Wait()
	return rankErrors(errs)
}

// RunLocal starts n local runtimes (see StartLocal), runs fn on every rank
// concurrently, shuts them down and returns the ranks' errors, each
// prefixed with its rank, joined (nil if every rank succeeded).
//
// fn gets the rank's Runtime, r, and its rank (r.Rank(), handy to index
// per-rank results); r.Size() is n, and r's other methods give the rest of
// the placement. These Runtimes are not the default one: code under fn
// calls r's methods (r.Allreduce, ...), never the package-level functions
// (hvd.Allreduce, ...), which act on the default Runtime and fail with an
// error that says so (hvd.Rank() and hvd.Size() are -1 there).
func RunLocal(n int, fn func(r *Runtime, rank int) error, opts ...Option) error {
	rts, err := StartLocal(n, opts...)
	if err != nil {
		return err
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, r := range rts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(r, i)
		}()
	}
	wg.Wait()
	return errors.Join(rankErrors(errs), StopLocal(rts))
}

func rankErrors(errs []error) error {
	var out []error
	for i, err := range errs {
		if err != nil {
			out = append(out, fmt.Errorf("rank %d: %w", i, err))
		}
	}
	return errors.Join(out...)
}
