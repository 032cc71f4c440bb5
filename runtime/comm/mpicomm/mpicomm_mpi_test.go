//go:build mpi && cgo

// The MPI adapter under real mpirun (scripts/mpitest.sh, np 2 and 4). All
// MPI work sits in one test that initialises MPI and finalises it at the
// end, so that this file needs no TestMain of its own beside the package's
// other tests.

package mpicomm_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/runtime/comm/mpicomm"
	"github.com/gohorovod/gohorovod/tensor"
)

func TestMPI(t *testing.T) {
	world, err := mpicomm.New()
	if err != nil {
		t.Fatalf("mpicomm.New: %v", err)
	}
	defer func() {
		if err := mpicomm.Finalize(); err != nil {
			t.Errorf("mpicomm.Finalize: %v", err)
		}
	}()
	defer world.Close()

	t.Run("conformance", func(t *testing.T) { commtest.RunRank(t, world) })

	// The same value cases with the agreement check off, as the runtime
	// runs its negotiated collectives.
	t.Run("check-off", func(t *testing.T) {
		c, err := mpicomm.New()
		if err != nil {
			t.Fatalf("mpicomm.New: %v", err)
		}
		defer c.Close()
		ac, ok := c.(comm.AgreementChecker)
		if !ok || !ac.Check() {
			t.Fatalf("the MPI communicator does not offer the agreement check on by default")
		}
		ac.SetCheck(false)
		for _, tc := range commtest.Cases() {
			if strings.HasPrefix(tc.Name, "error/") || c.Size() < tc.MinRanks {
				continue
			}
			if err := tc.Run(c); err != nil {
				t.Errorf("%s with the check off, rank %d: %v", tc.Name, c.Rank(), err)
			}
		}
	})

	t.Run("errors", func(t *testing.T) {
		if world.Size() < 2 {
			t.Skip("needs two ranks")
		}
		n := 4 + world.Rank()%2
		err := world.Allreduce(tensor.New(tensor.Float32, n), tensor.Sum)
		var me *comm.MismatchError
		if !errors.As(err, &me) || me.Op != "allreduce" || !strings.Contains(me.Detail, "element count") {
			t.Errorf("mismatched lengths: %v, want a *comm.MismatchError", err)
		}
	})

	t.Run("close", func(t *testing.T) {
		c, err := mpicomm.New()
		if err != nil {
			t.Fatalf("mpicomm.New: %v", err)
		}
		sub, err := c.Split(0, c.Rank())
		if err != nil {
			t.Fatalf("Split: %v", err)
		}
		if _, ok := sub.(comm.AgreementChecker); !ok {
			t.Error("a split communicator does not offer the agreement check")
		}
		for _, x := range []comm.Communicator{sub, c} {
			if err := x.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if err := x.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if err := x.Barrier(); !errors.Is(err, comm.ErrClosed) {
				t.Errorf("Barrier after Close = %v, want ErrClosed", err)
			}
			if _, err := x.SplitLocal(); !errors.Is(err, comm.ErrClosed) {
				t.Errorf("SplitLocal after Close = %v, want ErrClosed", err)
			}
		}
	})
}
