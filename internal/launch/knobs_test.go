package launch

import (
	"context"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/config"
)

func TestKnobWarnings(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  []string
		want []string
	}{
		{"nothing", nil, nil, nil},
		{"implemented knobs", []string{"--cycle-time-ms", "3", "--no-stall-check"}, []string{"HOROVOD_CACHE_CAPACITY=0"}, nil},
		{"turned off explicitly", []string{"--autotune=false", "--hierarchical-allreduce=0"}, []string{"HOROVOD_MPI_THREADS_DISABLE=0"}, nil},
		{"flags", []string{"--autotune", "--autotune-log-file", "a.csv", "--hierarchical-allreduce", "--hierarchical-allgather", "--mpi-threads-disable"}, nil, []string{
			"warning: --mpi-threads-disable (HOROVOD_MPI_THREADS_DISABLE) is not implemented yet: it has no effect",
		}},
		{"environment", nil, []string{"HOROVOD_AUTOTUNE=1", "HOROVOD_MPI_THREADS_DISABLE=1"}, []string{
			"warning: HOROVOD_MPI_THREADS_DISABLE (from the environment) is not implemented yet: it has no effect",
		}},
		{"flag over environment", []string{"--mpi-threads-disable"}, []string{"HOROVOD_MPI_THREADS_DISABLE=0"}, []string{
			"warning: --mpi-threads-disable (HOROVOD_MPI_THREADS_DISABLE) is not implemented yet: it has no effect",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Parse(append(append([]string{"-np", "2"}, tt.args...), "./train"), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			c, err := config.FromEnv(config.Lookup(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			if c, err = o.ApplyTo(c); err != nil {
				t.Fatal(err)
			}
			if got := knobWarnings(o, c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("knobWarnings =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestRunWarnsAboutUnimplementedKnobs: the warnings reach stderr before the
// job starts, and placement variables in the launcher's environment are
// neither warned about nor passed to the workers (MPI places them).
func TestRunWarnsAboutUnimplementedKnobs(t *testing.T) {
	f := newFixture(t, "HOROVOD_RANK=3", "HOROVOD_SIZE=4", "HOROVOD_HOSTNAME=h9", "HOROVOD_AUTOTUNE_LOG=at.csv")
	if err := f.l.Run(context.Background(), []string{"-np", "2", "--mpi-threads-disable", "--hierarchical-allreduce", f.prog}); err != nil {
		t.Fatalf("Run = %v (stderr %s)", err, f.err.String())
	}
	stderr := f.err.String()
	for _, want := range []string{
		"gohorovodrun: warning: --mpi-threads-disable (HOROVOD_MPI_THREADS_DISABLE) is not implemented yet",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "HIERARCHICAL") || strings.Contains(stderr, "AUTOTUNE") {
		t.Errorf("a warning about the implemented hierarchical allreduce or autotuning:\n%s", stderr)
	}
	if strings.Contains(stderr, "HOROVOD_RANK") || strings.Contains(stderr, "HOROVOD_HOSTNAME") {
		t.Errorf("warned about placement the launcher drops:\n%s", stderr)
	}
	env := f.file(t, "env")
	for _, v := range []string{"HOROVOD_RANK=", "HOROVOD_SIZE=", "HOROVOD_HOSTNAME="} {
		if strings.Contains(env, v) {
			t.Errorf("mpirun's environment has %s...", v)
		}
	}
	if !strings.Contains(env, "HOROVOD_HIERARCHICAL_ALLREDUCE=1") || !strings.Contains(env, "HOROVOD_AUTOTUNE_LOG=at.csv") {
		t.Errorf("mpirun's environment lacks the knobs:\n%s", env)
	}
}
