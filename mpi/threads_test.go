package mpi

import (
	"strings"
	"testing"
)

func TestCheckThreadLevel(t *testing.T) {
	cases := []struct {
		provided int
		ours     bool
		want     []string // substrings of the error; nil: no error
	}{
		{threadMultiple, true, nil},
		{threadMultiple, false, nil},
		{threadSerialized, true, []string{"MPI_THREAD_SERIALIZED", "not MPI_THREAD_MULTIPLE", "finalised", "--enable-mpi-thread-multiple", "HOROVOD_MPI_THREADS_DISABLE"}},
		{threadFunneled, true, []string{"MPI_THREAD_FUNNELED", "not MPI_THREAD_MULTIPLE"}},
		{threadSingle, true, []string{"MPI_THREAD_SINGLE", "not MPI_THREAD_MULTIPLE"}},
		{7, true, []string{"unknown thread level 7"}},
		{-1, false, []string{"unknown thread level -1", "initialised elsewhere"}},
		{threadSerialized, false, []string{"initialised elsewhere", "MPI_THREAD_SERIALIZED", "MPI_Init_thread"}},
	}
	for _, c := range cases {
		err := checkThreadLevel(c.provided, c.ours)
		if c.want == nil {
			if err != nil {
				t.Errorf("checkThreadLevel(%d, %v) = %v, want nil", c.provided, c.ours, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("checkThreadLevel(%d, %v) = nil, want an error", c.provided, c.ours)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("checkThreadLevel(%d, %v) = %q, does not say %q", c.provided, c.ours, err, w)
			}
		}
		// Only Init's own initialisation is finalised again.
		if !c.ours && strings.Contains(err.Error(), "finalised") {
			t.Errorf("checkThreadLevel(%d, false) = %q claims to have finalised MPI", c.provided, err)
		}
	}
}
