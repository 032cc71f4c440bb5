package mpi

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDetectLaunch(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want LaunchEnv
	}{
		{"none", nil, LaunchEnv{}},
		{"open mpi", map[string]string{"OMPI_COMM_WORLD_SIZE": "4"}, LaunchEnv{"OMPI_COMM_WORLD_SIZE", 4}},
		{"hydra", map[string]string{"PMI_SIZE": "2"}, LaunchEnv{"PMI_SIZE", 2}},
		{"open mpi first", map[string]string{"OMPI_COMM_WORLD_SIZE": "3", "PMI_SIZE": "2"}, LaunchEnv{"OMPI_COMM_WORLD_SIZE", 3}},
		{"garbage ignored", map[string]string{"OMPI_COMM_WORLD_SIZE": "many", "PMI_SIZE": " 2 "}, LaunchEnv{"PMI_SIZE", 2}},
		{"zero ignored", map[string]string{"PMI_SIZE": "0"}, LaunchEnv{}},
		{"negative ignored", map[string]string{"PMI_SIZE": "-3"}, LaunchEnv{}},
		{"one", map[string]string{"PMI_SIZE": "1"}, LaunchEnv{"PMI_SIZE", 1}},
		{"srun", map[string]string{"SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4"}, LaunchEnv{"SLURM_STEP_NUM_TASKS", 4}},
		{"mpirun inside a step", map[string]string{"SLURM_STEP_NUM_TASKS": "1", "OMPI_COMM_WORLD_SIZE": "8"}, LaunchEnv{"OMPI_COMM_WORLD_SIZE", 8}},
		{"allocation without a step", map[string]string{"SLURM_NTASKS": "4", "SLURM_JOB_ID": "7"}, LaunchEnv{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DetectLaunch(envOf(tt.env)); got != tt.want {
				t.Errorf("DetectLaunch = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCheckLaunch(t *testing.T) {
	tests := []struct {
		name     string
		env      LaunchEnv
		built    bool
		size     int
		wantErr  bool
		notBuilt bool     // error wraps ErrNotBuiltIn
		words    []string // the message must contain these
	}{
		{"no launcher, not built", LaunchEnv{}, false, 0, false, false, nil},
		{"one rank, not built", LaunchEnv{"PMI_SIZE", 1}, false, 0, false, false, nil},
		{"four ranks, not built", LaunchEnv{"OMPI_COMM_WORLD_SIZE", 4}, false, 0, true, true,
			[]string{"OMPI_COMM_WORLD_SIZE=4", "go build -tags mpi", "make deps"}},
		{"hydra, not built", LaunchEnv{"PMI_SIZE", 2}, false, 0, true, true, []string{"PMI_SIZE=2", "-tags mpi"}},
		{"built, sizes agree", LaunchEnv{"OMPI_COMM_WORLD_SIZE", 4}, true, 4, false, false, nil},
		{"built, wrong launcher", LaunchEnv{"PMI_SIZE", 2}, true, 1, true, false,
			[]string{"PMI_SIZE=2", "Open MPI", "world of 1", "mpich"}},
		{"built, singleton", LaunchEnv{}, true, 1, false, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckLaunch(tt.env, tt.built, "Open MPI", tt.size)
			if (err != nil) != tt.wantErr {
				t.Fatalf("CheckLaunch = %v, want error %v", err, tt.wantErr)
			}
			if err == nil {
				return
			}
			if errors.Is(err, ErrNotBuiltIn) != tt.notBuilt {
				t.Errorf("errors.Is(err, ErrNotBuiltIn) = %v, want %v (%v)", !tt.notBuilt, tt.notBuilt, err)
			}
			for _, w := range tt.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestMPISettings(t *testing.T) {
	names := func(s []Setting) string {
		var b []string
		for _, x := range s {
			b = append(b, x.Name+"="+x.Value)
		}
		return strings.Join(b, " ")
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no launcher", nil, YieldEnv + "=1"},
		{"one node", map[string]string{"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, YieldEnv + "=1"},
		{"user's yield kept", map[string]string{YieldEnv: "0"}, ""},
		{"across nodes", map[string]string{"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
			YieldEnv + "=0 " + DynamicRulesEnv + "=1 " + AllreduceAlgorithmEnv + "=4"},
		{"across nodes, user's algorithm kept", map[string]string{"OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
			AllreduceAlgorithmEnv: "3"}, YieldEnv + "=0"},
		{"across nodes, user's rules kept", map[string]string{"OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
			DynamicRulesEnv: "0", YieldEnv: "1"}, ""},
		{"garbage sizes: one node", map[string]string{"OMPI_COMM_WORLD_SIZE": "x", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}, YieldEnv + "=1"},
	} {
		lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		if got := names(MPISettings(lookup)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestApplySettingsKeepsTheUsersChoice(t *testing.T) {
	t.Setenv(YieldEnv, "")
	os.Unsetenv(YieldEnv)
	t.Setenv("OMPI_COMM_WORLD_SIZE", "")
	os.Unsetenv("OMPI_COMM_WORLD_SIZE")
	if s := applySettings(); len(s) != 1 || os.Getenv(YieldEnv) != "1" {
		t.Errorf("applied %v, %s = %q; want it set to 1", s, YieldEnv, os.Getenv(YieldEnv))
	}
	t.Setenv(YieldEnv, "0") // the user's choice stands
	if s := applySettings(); len(s) != 0 || os.Getenv(YieldEnv) != "0" {
		t.Errorf("applied %v, %s = %q; want the user's 0 kept", s, YieldEnv, os.Getenv(YieldEnv))
	}
}

func TestCheckSrun(t *testing.T) {
	// The variables srun sets in a task (SLURM 22.05, checked on a real
	// one-node cluster): a bare srun, and one with --mpi=pmix.
	bare := map[string]string{"SLURM_STEP_ID": "0", "SLURM_STEPID": "0", "SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range bare {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cases := []struct {
		name    string
		env     map[string]string
		library string
		refuse  bool
		says    string
	}{
		{"outside any step", map[string]string{"SLURM_JOB_ID": "7", "SLURM_PROCID": "0"}, "Open MPI", false, ""},
		{"no SLURM at all", map[string]string{}, "Open MPI", false, ""},
		{"bare srun, Open MPI", bare, "Open MPI", true, "--mpi=pmix"},
		{"bare srun, old step variable only", map[string]string{"SLURM_STEPID": "3"}, "Open MPI", true, `plugin "none"`},
		{"srun --mpi=pmi2, Open MPI", with("SLURM_MPI_TYPE", "pmi2", "PMI_RANK", "1"), "Open MPI", true, `plugin "pmi2"`},
		{"srun --mpi=pmix", with("SLURM_MPI_TYPE", "pmix", "PMIX_RANK", "1"), "Open MPI", false, ""},
		{"mpirun inside a step", with("OMPI_COMM_WORLD_SIZE", "4", "PMIX_RANK", "2"), "Open MPI", false, ""},
		{"srun --mpi=pmi2, MPICH", with("SLURM_MPI_TYPE", "pmi2", "PMI_RANK", "1"), "MPICH", false, ""},
		{"bare srun, MPICH", bare, "MPICH", true, "--mpi=pmi2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckSrun(func(k string) string { return c.env[k] }, c.library)
			if !c.refuse {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted a step MPI cannot start in")
			}
			if !errors.Is(err, ErrSrunPMI) {
				t.Errorf("error does not wrap ErrSrunPMI: %v", err)
			}
			for _, want := range []string{c.says, "HOROVOD_CONTROLLER=gloo", c.library} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q: %v", want, err)
				}
			}
		})
	}
}

func TestStartedByMPI(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{"OMPI_COMM_WORLD_SIZE": "2"}, true},
		{map[string]string{"PMI_SIZE": "4"}, true},
		{map[string]string{"PMIX_RANK": "0"}, true},
		{map[string]string{"SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_ID": "0"}, false}, // a bare srun step
		{map[string]string{}, false},
	} {
		if got := StartedByMPI(envOf(c.env)); got != c.want {
			t.Errorf("StartedByMPI(%v) = %v, want %v", c.env, got, c.want)
		}
	}
}
