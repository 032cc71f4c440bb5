//go:build (mpi && cgo) || gloo

package runtime

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/tensor"
)

// TestMPIAutotune: as processes, rank 0's tuner finishes while the ranks
// reduce, and every rank ends with the setting it kept, the runtime's
// piece sizes and the response cache (tried off and on) included.
func TestMPIAutotune(t *testing.T) {
	cfg := testConfig()
	cfg.Autotune = true
	cfg.AutotuneWarmupSamples, cfg.AutotuneStepsPerSample, cfg.AutotuneMaxSamples = 0, 1, 6
	cfg.FusionThreshold = 0 // set away from the default: fixed
	r := new(Runtime)
	if err := r.Init(append([]Option{WithConfig(cfg), WithoutMPIFinalize(), WithLogger(zerolog.Nop())}, worldOpts(t)...)...); err != nil {
		t.Fatal(err)
	}
	for step := range 150 {
		x := tensor.FromFloat32(make([]float32, 300_000)) // over the 1 MiB chunk the tuner tries
		x.Float32s()[0] = 1
		if err := r.AllreduceInPlace(mpiCtx(t), x, "w", Sum); err != nil {
			t.Fatal(err)
		}
		if x.Float32s()[0] != float32(r.Size()) {
			t.Fatalf("step %d: sum %v", step, x.Float32s()[0])
		}
	}
	if err := r.Barrier(mpiCtx(t)); err != nil {
		t.Fatal(err)
	}
	r.Shutdown()
	l := r.loop
	const n = 6
	mine := []int64{l.cfg.FusionThreshold, int64(l.cfg.CycleTime), b2i(!l.tune.sync.Active()), int64(l.p.chunk), int64(l.p.fuseChunk),
		int64(l.st.Cache().Capacity())}
	all := make([]int64, n*world.Size())
	counts := make([]int, world.Size())
	for i := range counts {
		counts[i] = n
	}
	if err := world.Allgatherv(tensor.FromInt64(mine), tensor.FromInt64(all), counts); err != nil {
		t.Fatal(err)
	}
	for k := range world.Size() {
		got := all[n*k : n*(k+1)]
		if got[0] != 0 || got[1] != all[1] || got[2] != 1 || got[3] != all[3] || got[4] != all[4] || got[5] != all[5] {
			t.Fatalf("rank %d ended with fusion %d cycle %d done %d chunk %d fusion chunk %d cache capacity %d; rank 0 with %v",
				k, got[0], got[1], got[2], got[3], got[4], got[5], all[:n])
		}
	}
	if want := map[bool]int64{true: int64(cfg.CacheCapacity), false: 0}[l.tune.sync.Applied().CacheEnabled]; all[5] != want {
		t.Fatalf("cache capacity %d with cache_enabled %v kept", all[5], l.tune.sync.Applied().CacheEnabled)
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
