//go:build (mpi && cgo) || gloo

package runtime

import (
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/tensor"
)

// psRuntime starts a Runtime over the job's world with extra options; it
// returns Init's error instead of failing, for the tests of failed Inits.
func psRuntime(t *testing.T, extra ...Option) (*Runtime, error) {
	t.Helper()
	r := new(Runtime)
	opts := append([]Option{WithConfig(testConfig()), WithoutMPIFinalize(), WithLogger(zerolog.Nop())}, worldOpts(t)...)
	err := r.Init(append(opts, extra...)...)
	t.Cleanup(func() {
		r.Shutdown()
		world.Barrier()
	})
	return r, err
}

func TestMPIProcessSetsDisjoint(t *testing.T) {
	opts, even, odd := staticParitySets(world.Size())
	r, err := psRuntime(t, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := scenarioDisjointSets(r, even, odd); err != nil {
		t.Fatal(err)
	}
}

func TestMPIProcessSetErrors(t *testing.T) {
	opts, even, odd := staticParitySets(world.Size())
	r, err := psRuntime(t, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := scenarioErrors(r, even, odd); err != nil {
		t.Fatal(err)
	}
}

func TestMPIProcessSetsDynamic(t *testing.T) {
	r, err := psRuntime(t, WithDynamicProcessSets())
	if err != nil {
		t.Fatal(err)
	}
	if err := scenarioDynamic(r); err != nil {
		t.Fatal(err)
	}
}

// TestMPIProcessSetsMismatchedAtInit: rank 0 registers one set more than
// the others; Init fails on every rank with Horovod's text, and the next
// Init works.
func TestMPIProcessSetsMismatchedAtInit(t *testing.T) {
	sets := []*ProcessSet{NewProcessSet(0)}
	if world.Rank() == 0 {
		sets = append(sets, NewProcessSet(world.Size()-1))
	}
	_, err := psRuntime(t, WithProcessSets(sets...))
	if !errors.Is(err, ErrProcessSetInit) || !strings.Contains(err.Error(), MismatchedProcessSetsText) {
		t.Fatalf("Init = %v, want %q", err, MismatchedProcessSetsText)
	}
	r, err := psRuntime(t)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Allreduce(mpiCtx(t), tensor.FromInt64([]int64{1}), "after", Sum)
	if err != nil || s.Int64s()[0] != int64(world.Size()) {
		t.Fatalf("allreduce after a failed Init: %v %v", s, err)
	}
}

// TestMPIProcessSetFromComm: the odd ranks' communicator, split by the
// program, names a set.
func TestMPIProcessSetFromComm(t *testing.T) {
	base := freshWorld(t)
	color := -1
	if base.Rank()%2 == 1 {
		color = 0
	}
	sub, err := base.Split(color, base.Rank())
	if color >= 0 {
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
	}
	ps := ProcessSetFromComm(sub)
	r := new(Runtime)
	if err := r.Init(WithConfig(testConfig()), WithLogger(zerolog.Nop()), WithCommunicator(base), WithProcessSets(ps)); err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()
	if got, want := ps.Ranks(), parity(world.Size(), 1); !equalInts(got, want) {
		t.Fatalf("ranks %v, want %v", got, want)
	}
	if ps.Included() {
		s, err := r.Allreduce(mpiCtx(t), tensor.FromInt64([]int64{int64(r.Rank())}), "x", Sum, InProcessSet(ps))
		if err != nil {
			t.Fatal(err)
		}
		want := int64(0)
		for _, g := range ps.Ranks() {
			want += int64(g)
		}
		if s.Int64s()[0] != want {
			t.Fatalf("sum %d, want %d", s.Int64s()[0], want)
		}
	}
	if err := r.Barrier(mpiCtx(t)); err != nil {
		t.Fatal(err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
