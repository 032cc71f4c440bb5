package runtime

import (
	"context"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/tensor"
)

// TestPackageLevelCallsUseTheDefault runs package-level calls on a
// one-rank default Runtime, then puts the previous default back.
func TestPackageLevelCallsUseTheDefault(t *testing.T) {
	r := new(Runtime)
	prev := SetDefault(r)
	defer SetDefault(prev)
	if _, err := NewAllreduceGroup([]*tensor.Tensor{fill(tensor.Float32, 1, 1)}, []string{"g"}, Sum); err == nil {
		t.Fatal("a group before Init")
	}
	one := memcomm.NewGroup(1)
	defer one[0].Close()
	if err := Init(WithCommunicator(one[0]), WithConfig(testConfig()), WithLogger(zerolog.Nop())); err != nil {
		t.Fatal(err)
	}
	defer Shutdown()
	ctx := context.Background()
	x := fill(tensor.Float32, 3, 2)
	g, err := NewAllreduceGroup([]*tensor.Tensor{x}, []string{"g"}, Sum, Postscale(0.5))
	if err != nil {
		t.Fatal(err)
	}
	h, err := g.Start()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := x.Float32s()[2]; got != 1 {
		t.Errorf("group on the default runtime: %v, want 1", got)
	}
	if err := AllreduceInPlace(ctx, x, "g", Sum); err == nil {
		t.Error("allreduce under a name the group holds succeeded")
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := AllreduceInPlace(ctx, x, "g", Sum); err != nil {
		t.Errorf("allreduce after the group's close: %v", err)
	}
	if err := Barrier(ctx); err != nil {
		t.Error(err)
	}
}
