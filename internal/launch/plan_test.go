package launch

import (
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/config"
)

func TestDetectFlavor(t *testing.T) {
	tests := []struct {
		out  string
		want Flavor
	}{
		{"mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n", OpenMPI},
		{"mpirun (OpenRTE) 1.10.7\n", OpenMPI},
		{"mpirun (IBM Spectrum MPI) 10.3.1\n", OpenMPI},
		{"HYDRA build details:\n    Version:                                 4.0.2\n", MPICH},
		{"Intel(R) MPI Library for Linux* OS, Version 2021.6 Build 20220227\nHYDRA build details:\n", IntelMPI},
	}
	for _, tt := range tests {
		got, err := DetectFlavor(tt.out)
		if err != nil || got != tt.want {
			t.Errorf("DetectFlavor(%q) = %v, %v; want %v", tt.out, got, err, tt.want)
		}
	}
	if _, err := DetectFlavor("slurm 23.02\n"); err == nil || !strings.Contains(err.Error(), `"slurm 23.02"`) {
		t.Errorf("DetectFlavor(unknown) error = %v, want one quoting the output", err)
	}
}

// baseSpec is a small Open MPI job on this machine, as a non-root user.
func baseSpec() Spec {
	return Spec{
		MPIRun:  "mpirun",
		Flavor:  OpenMPI,
		NP:      2,
		Hosts:   []Host{{"localhost", 2}},
		Command: []string{"./train", "--epochs", "3"},
		Config:  config.Default(),
		Environ: []string{"PATH=/bin", "HOME=/root"},
		CPUs:    8,
		IsLocal: func(h string) bool { return h == "localhost" },
	}
}

func xs(names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, "-x", n)
	}
	return out
}

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestBuildPlanArgv(t *testing.T) {
	knobs := config.Names()[:len(config.Default().Environ())]
	forwarded := func(extra ...string) []string {
		names := append([]string{"HOME", "PATH"}, knobs...)
		names = append(names, extra...)
		sort.Strings(names)
		return xs(names...)
	}
	ompiLocal := []string{"-mca", "pml", "ob1", "-mca", "btl", "self,vader", "-mca", "btl_vader_single_copy_mechanism", "none"}
	tests := []struct {
		name string
		mod  func(*Spec)
		want []string
	}{
		{"open mpi minimal", func(s *Spec) {},
			cat([]string{"mpirun", "--tag-output", "-np", "2", "-H", "localhost:2", "--bind-to", "none", "--map-by", "slot"},
				ompiLocal, forwarded(), []string{"./train", "--epochs", "3"})},
		{"open mpi with cross-memory attach", func(s *Spec) { s.CMA = true },
			cat([]string{"mpirun", "--tag-output", "-np", "2", "-H", "localhost:2", "--bind-to", "none", "--map-by", "slot"},
				ompiLocal[:len(ompiLocal)-1], []string{"cma"}, forwarded(), []string{"./train", "--epochs", "3"})},
		{"open mpi as root, oversubscribed", func(s *Spec) { s.Root, s.CPUs, s.NP, s.Hosts = true, 2, 4, []Host{{"localhost", 4}} },
			cat([]string{"mpirun", "--allow-run-as-root", "--tag-output", "-np", "4", "-H", "localhost:4", "--bind-to", "none",
				"--map-by", "slot", "--oversubscribe"}, ompiLocal, forwarded(), []string{"./train", "--epochs", "3"})},
		{"open mpi remote hosts, full", func(s *Spec) {
			s.NP, s.Hosts, s.CPUs = 3, []Host{{"h1", 2}, {"h2", 2}, {"h3", 2}}, 1
			s.SSHPort, s.SSHIdentity, s.NICs = 1022, "/k/id", []string{"eth0", "eth1"}
			s.OutputFilename, s.MPIArgs = "/logs", []string{"--mca", "btl_tcp_if_exclude", "lo"}
			s.Environ = append(s.Environ, "OMPI_MCA_foo=1", "CUDA_VISIBLE_DEVICES=0", "BASH_FUNC_x%%=() {}", "NCCL_DEBUG=INFO")
		}, cat([]string{"mpirun", "--tag-output", "-np", "3", "-H", "h1:2,h2:2", "--bind-to", "none", "--map-by", "slot",
			"-mca", "pml", "ob1", "-mca", "btl", "^openib",
			"-mca", "mpi_yield_when_idle", "0", "-mca", "coll_tuned_use_dynamic_rules", "1", "-mca", "coll_tuned_allreduce_algorithm", "4",
			"-mca", "plm_rsh_args", "-p 1022 -i /k/id",
			"-mca", "btl_tcp_if_include", "eth0,eth1", "-x", "NCCL_SOCKET_IFNAME=eth0,eth1", "-x", "HOROVOD_GLOO_IFACE=eth0",
			"--output-filename", "/logs"},
			forwarded("NCCL_DEBUG"), []string{"--mca", "btl_tcp_if_exclude", "lo", "./train", "--epochs", "3"})},
		{"mpich", func(s *Spec) { s.Flavor, s.NP, s.Hosts = MPICH, 3, []Host{{"h1", 2}, {"h2", 1}} },
			cat([]string{"mpirun", "-l", "-np", "3", "-hosts", "h1:2,h2:1", "-bind-to", "none", "-map-by", "slot"},
				genv(config.Default()), []string{"./train", "--epochs", "3"})},
		{"intel", func(s *Spec) {
			s.Flavor, s.NP, s.Hosts, s.SSHPort, s.NICs = IntelMPI, 4, []Host{{"h1", 2}, {"h2", 2}}, 22, []string{"ib0"}
			s.OutputFilename = "out"
		}, cat([]string{"mpirun", "-l", "-np", "4", "-ppn", "2", "-hosts", "h1,h2", "-bootstrap", "ssh", "-bootstrap-exec-args", "-p 22",
			"-iface", "ib0", "-genv", "NCCL_SOCKET_IFNAME", "ib0",
			"-outfile-pattern", "out/rank.%r.stdout", "-errfile-pattern", "out/rank.%r.stderr"},
			genv(config.Default()), []string{"./train", "--epochs", "3"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := baseSpec()
			tt.mod(&s)
			p, err := BuildPlan(s)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.Argv, tt.want) {
				t.Errorf("argv\n got %s\nwant %s", ShellQuote(p.Argv), ShellQuote(tt.want))
			}
		})
	}
}

func genv(c config.Config) []string {
	var out []string
	for _, kv := range c.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, "-genv", k, v)
	}
	return out
}

func TestBuildPlanOversubscribe(t *testing.T) {
	tests := []struct {
		name  string
		np    int
		cpus  int
		hosts []Host
		want  bool
	}{
		{"fits the cores", 2, 2, []Host{{"localhost", 2}}, false},
		{"more ranks than cores", 4, 2, []Host{{"localhost", 4}}, true},
		{"remote host: its cores are unknown", 4, 2, []Host{{"far", 4}}, false},
	}
	for _, tt := range tests {
		s := baseSpec()
		s.NP, s.CPUs, s.Hosts = tt.np, tt.cpus, tt.hosts
		p, err := BuildPlan(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := contains(p.Argv, "--oversubscribe"); got != tt.want {
			t.Errorf("%s: --oversubscribe = %v, want %v (%s)", tt.name, got, tt.want, ShellQuote(p.Argv))
		}
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func TestBuildPlanEnv(t *testing.T) {
	s := baseSpec()
	s.Environ = []string{"PATH=/bin", "HOROVOD_CYCLE_TIME=9", "HOROVOD_RANK=3", "MY_VAR=x"}
	s.Config.CycleTime = 2 * time.Millisecond
	s.Config.StallShutdownTime = 5 * time.Second
	p, err := BuildPlan(s)
	if err != nil {
		t.Fatal(err)
	}
	// The stale HOROVOD_* values of the caller's shell are gone, the
	// Config's are there, exactly once, and the rest is kept.
	got, err := config.FromEnv(config.Lookup(p.Env))
	if err != nil || got != s.Config {
		t.Errorf("workers would read %+v, %v; want %+v", got, err, s.Config)
	}
	count := map[string]int{}
	for _, kv := range p.Env {
		k, _, _ := strings.Cut(kv, "=")
		count[k]++
	}
	if count["HOROVOD_CYCLE_TIME"] != 1 || count["HOROVOD_RANK"] != 0 || count["MY_VAR"] != 1 || count["PATH"] != 1 {
		t.Errorf("env counts %v (env %q)", count, p.Env)
	}
	if !contains(p.Argv, "MY_VAR") || !contains(p.Argv, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS") {
		t.Errorf("argv does not forward MY_VAR and the knobs: %s", ShellQuote(p.Argv))
	}
}

// TestBuildPlanLauncher: the workers learn this launcher's identity, never
// one left in the caller's environment (a launcher started from a worker).
func TestBuildPlanLauncher(t *testing.T) {
	s := baseSpec()
	s.Environ = []string{"PATH=/bin", "GOHOROVOD_LAUNCHER=1:2:old:pid:[3]"}
	s.Launcher = "77:88:boot:pid:[9]"
	p, err := BuildPlan(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := config.FromEnv(config.Lookup(p.Env))
	if err != nil || got.Launcher != s.Launcher {
		t.Errorf("workers would read launcher %q, %v; want %q", got.Launcher, err, s.Launcher)
	}
	if n := strings.Count(strings.Join(p.Env, "\n"), "GOHOROVOD_LAUNCHER="); n != 1 {
		t.Errorf("GOHOROVOD_LAUNCHER set %d times in %q", n, p.Env)
	}
	if !contains(p.Argv, "GOHOROVOD_LAUNCHER") {
		t.Errorf("argv does not forward GOHOROVOD_LAUNCHER: %s", ShellQuote(p.Argv))
	}
	s.Launcher = "" // not named: the stale one is dropped too
	if p, _ = BuildPlan(s); strings.Contains(strings.Join(p.Env, "\n"), "GOHOROVOD_LAUNCHER") {
		t.Errorf("a stale GOHOROVOD_LAUNCHER reached the workers: %q", p.Env)
	}
}

func TestBuildPlanErrors(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Spec)
		wantErr string
	}{
		{"np zero", func(s *Spec) { s.NP = 0 }, "-np must be at least 1"},
		{"too many processes", func(s *Spec) { s.NP = 3 }, "requested more processes (3) than there are available slots (2)"},
		{"no program", func(s *Spec) { s.Command = nil }, "no program given"},
		{"negative knob", func(s *Spec) { s.Config.CacheCapacity = -1 }, "HOROVOD_CACHE_CAPACITY"},
		{"intel uneven", func(s *Spec) { s.Flavor, s.NP, s.Hosts = IntelMPI, 3, []Host{{"a", 2}, {"b", 1}} }, "same slot count"},
		{"hydra two nics", func(s *Spec) { s.Flavor, s.NICs = MPICH, []string{"a", "b"} }, "one --network-interface"},
	}
	for _, tt := range tests {
		s := baseSpec()
		tt.mod(&s)
		_, err := BuildPlan(s)
		if err == nil || !IsUsage(err) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error = %v, want a usage error containing %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestBuildPlanLargeCluster(t *testing.T) {
	s := baseSpec()
	s.Hosts = nil
	for i := 0; i < 64; i++ {
		s.Hosts = append(s.Hosts, Host{Name: "n" + string(rune('A'+i%26)) + string(rune('a'+i/26)), Slots: 1})
	}
	s.NP = 64
	p, err := BuildPlan(s)
	if err != nil {
		t.Fatal(err)
	}
	if j := strings.Join(p.Argv, " "); !strings.Contains(j, "-mca plm_rsh_no_tree_spawn true -mca plm_rsh_num_concurrent 64") {
		t.Errorf("64 hosts: no tree-spawn settings in %s", j)
	}
}

func TestShellQuoteAndSplitArgs(t *testing.T) {
	argv := []string{"mpirun", "-x", "A=b c", "it's", "", `"q"`, "^openib", "$HOME"}
	line := ShellQuote(argv)
	back, err := SplitArgs(line)
	if err != nil || !reflect.DeepEqual(back, argv) {
		t.Errorf("SplitArgs(ShellQuote(%q)) = %q, %v (line %s)", argv, back, err, line)
	}
	tests := []struct {
		in   string
		want []string
	}{
		{`--mca btl self,vader`, []string{"--mca", "btl", "self,vader"}},
		{`-x "A=1 2" -x B='3 4'`, []string{"-x", "A=1 2", "-x", "B=3 4"}},
		{`a\ b "c\"d"`, []string{"a b", `c"d`}},
		{"  ", nil},
	}
	for _, tt := range tests {
		got, err := SplitArgs(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("SplitArgs(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{`"open`, `'open`} {
		if _, err := SplitArgs(bad); err == nil {
			t.Errorf("SplitArgs(%q) accepted an unterminated quote", bad)
		}
	}
}

func TestAcrossNodesMCAKeepsTheUsersChoice(t *testing.T) {
	all := "-mca mpi_yield_when_idle 0 -mca coll_tuned_use_dynamic_rules 1 -mca coll_tuned_allreduce_algorithm 4"
	for _, tc := range []struct {
		env, args []string
		want      string
	}{
		{nil, nil, all},
		{[]string{"OMPI_MCA_mpi_yield_when_idle=1"}, nil, "-mca coll_tuned_use_dynamic_rules 1 -mca coll_tuned_allreduce_algorithm 4"},
		{nil, []string{"--mca", "coll_tuned_allreduce_algorithm", "3"}, "-mca mpi_yield_when_idle 0"},
		{[]string{"OMPI_MCA_coll_tuned_use_dynamic_rules=0"}, []string{"--mca", "mpi_yield_when_idle", "1"}, ""},
	} {
		if got := strings.Join(acrossNodesMCA(tc.env, tc.args), " "); got != tc.want {
			t.Errorf("env %v args %v: %q, want %q", tc.env, tc.args, got, tc.want)
		}
	}
}

// TestBuildPlanGlooIfaceFollowsNIC: --network-interface also names the
// interface of the runtime's TCP ring for host tensors, unless the user
// set HOROVOD_GLOO_IFACE.
func TestBuildPlanGlooIfaceFollowsNIC(t *testing.T) {
	for _, c := range []struct {
		iface string // the launcher's HOROVOD_GLOO_IFACE
		want  string
	}{
		{"", "HOROVOD_GLOO_IFACE=ib0"},
		{"eth9", "HOROVOD_GLOO_IFACE"}, // exported from the environment as it is
	} {
		s := baseSpec()
		s.Hosts, s.NICs = []Host{{"h1", 1}, {"h2", 1}}, []string{"ib0", "eth0"}
		s.Config.GlooIface = c.iface
		p, err := BuildPlan(s)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for i, a := range p.Argv {
			if strings.HasPrefix(a, "HOROVOD_GLOO_IFACE") && p.Argv[i-1] == "-x" {
				n++
				if a != c.want {
					t.Errorf("HOROVOD_GLOO_IFACE=%q: -x %s, want -x %s", c.iface, a, c.want)
				}
			}
		}
		if n != 1 {
			t.Errorf("HOROVOD_GLOO_IFACE=%q: exported %d times in %v", c.iface, n, p.Argv)
		}
	}
}
