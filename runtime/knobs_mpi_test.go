//go:build (mpi && cgo) || gloo

package runtime

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// TestMPIKnobAgreement starts every rank with its own
// HOROVOD_FUSION_THRESHOLD (odd ranks differ from even ones): Init, over
// MPI or the embedded transport, fails on every rank naming the knob and
// each rank's value. Then the ranks retry with one value and Init works.
func TestMPIKnobAgreement(t *testing.T) {
	rank, size := world.Rank(), world.Size()
	threshold := func(r int) int64 { return int64(1+r%2) << 20 }
	for _, name := range config.Names() {
		t.Setenv(name, "")
	}
	t.Setenv(config.EnvFusionThreshold, strconv.FormatInt(threshold(rank), 10))
	t.Setenv(config.EnvCycleTime, "1")

	r := new(Runtime)
	err := r.Init(append(worldOpts(t), WithLogger(zerolog.Nop()))...)
	var parts []string
	for i := range size {
		parts = append(parts, fmt.Sprintf("rank %d: %d", i, threshold(i)))
	}
	want := "hvd: Horovod initialization failed: ranks disagree on HOROVOD_FUSION_THRESHOLD: " +
		strings.Join(parts, ", ") + " (every rank must be started with the same value)"
	var ae *config.AgreementError
	if !errors.As(err, &ae) || err.Error() != want {
		t.Fatalf("Init = %v\nwant %s", err, want)
	}
	if r.IsInitialized() {
		t.Fatal("initialised after a failed Init")
	}
	if err := world.Barrier(); err != nil { // the transport still works
		t.Fatal(err)
	}

	// Options count too: one rank chunks differently.
	t.Setenv(config.EnvFusionThreshold, "1048576")
	opts := append(worldOpts(t), WithLogger(zerolog.Nop()))
	if rank == size-1 {
		opts = append(opts, WithChunkBytes(4096))
	}
	others := "rank 0"
	if size > 2 {
		others = fmt.Sprintf("ranks 0-%d", size-2)
	}
	want = fmt.Sprintf("ranks disagree on hvd.WithChunkBytes: %s: 4194304, rank %d: 4096 (", others, size-1)
	if err = r.Init(opts...); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Init with one rank's own chunk size = %v, want %q", err, want)
	}

	// Agreeing ranks start, and reduce.
	if err := r.Init(append(worldOpts(t), WithLogger(zerolog.Nop()))...); err != nil {
		t.Fatalf("Init with agreeing knobs: %v", err)
	}
	t.Cleanup(func() {
		r.Shutdown()
		world.Barrier()
	})
	if got := r.Config().FusionThreshold; got != 1<<20 {
		t.Errorf("fusion threshold %d, want %d", got, 1<<20)
	}
	x, err := r.Allreduce(mpiCtx(t), fill(tensor.Float32, 8, float64(rank)), "knobs.x", Sum)
	if err != nil {
		t.Fatal(err)
	}
	if want := float64(size * (size - 1) / 2); first(x) != want {
		t.Errorf("sum %v, want %v", first(x), want)
	}
}
