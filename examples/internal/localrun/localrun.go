package localrun

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// Run calls run on n in-memory ranks under the runtime configuration cfg
// (logging nothing), each with a context that ends after timeout and an
// output of its own, and returns each rank's result and output, and the
// ranks' errors joined.
func Run[R any](n int, cfg config.Config, timeout time.Duration, run func(ctx context.Context, r *hvd.Runtime, out io.Writer) (R, error)) ([]R, []bytes.Buffer, error) {
	res := make([]R, n)
	outs := make([]bytes.Buffer, n)
	err := hvd.RunLocal(n, func(r *hvd.Runtime, rank int) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var err error
		res[rank], err = run(ctx, r, &outs[rank])
		return err
	}, hvd.WithConfig(cfg), hvd.WithLogger(zerolog.Nop()))
	return res, outs, err
}

// OnRanks runs f on n ranks, each a Runtime over one in-memory group with
// a cycle time of a millisecond, with the collectives over it, and fails
// t on any rank's error.
func OnRanks(t testing.TB, n int, f func(rank int, c optim.Collectives) error) {
	t.Helper()
	cfg := config.Default()
	cfg.CycleTime = time.Millisecond
	err := hvd.RunLocal(n, func(r *hvd.Runtime, rank int) error {
		c, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		return f(rank, c)
	}, hvd.WithConfig(cfg), hvd.WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatalf("%d ranks: %v", n, err)
	}
}
