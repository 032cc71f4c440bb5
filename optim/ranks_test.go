package optim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/comm/embedded"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// startEmbedded runs n Runtimes over the embedded transport in this
// process (Unix sockets at 2 ranks, TCP above), skipping where it cannot;
// they stop at the test's end.
func startEmbedded(t *testing.T, n int) []*hvd.Runtime {
	t.Helper()
	group, err := embedded.NewLocalGroup(n, embedded.GroupOptions{Unix: n == 2})
	if err != nil {
		t.Skip("embedded transport unavailable here:", err)
	}
	cfg := config.Default()
	cfg.CycleTime = time.Millisecond
	rts := make([]*hvd.Runtime, n)
	onRanks(t, n, func(rank int) error {
		rts[rank] = new(hvd.Runtime)
		return rts[rank].Init(hvd.WithCommunicator(group[rank]), hvd.WithConfig(cfg), hvd.WithLogger(zerolog.Nop()))
	})
	t.Cleanup(func() {
		onRanks(t, n, func(rank int) error { return rts[rank].Shutdown() })
		for _, c := range group {
			c.Close()
		}
	})
	return rts
}

// onColls runs f on every rank of rts at once, each with its Collectives
// and a context of a minute, and fails the test on the first error.
func onColls(t *testing.T, rts []*hvd.Runtime, f func(ctx context.Context, coll Collectives, rank int) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	onRanks(t, len(rts), func(rank int) error {
		coll, err := FromRuntime(rts[rank])
		if err != nil {
			return err
		}
		return f(ctx, coll, rank)
	})
}

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
