package launch

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gohorovod/gohorovod/runtime/config"
)

// Spec is everything the plan depends on: the parsed request and the facts
// about this machine, gathered beforehand so that BuildPlan is a pure
// function.
type Spec struct {
	MPIRun  string   // the mpirun to run (a name on PATH or a path)
	Flavor  Flavor   // its implementation
	NP      int      // number of processes
	Hosts   []Host   // where they may run (slots checked against NP)
	Command []string // the worker program and its arguments

	Config  config.Config // the knobs, exported to every worker
	Environ []string      // the launcher's own environment, "KEY=value"
	// Launcher names the launcher process for the workers to watch
	// (procid.ID's form; GOHOROVOD_LAUNCHER); "": not watched.
	Launcher string

	Root    bool              // running as uid 0
	CPUs    int               // cores on this machine
	IsLocal func(string) bool // whether a host name means this machine

	SSHPort        int      // 0: ssh's default
	SSHIdentity    string   // "" : ssh's default
	NICs           []string // network interfaces to use; nil: MPI's choice
	OutputFilename string   // "" : output goes to the terminal
	MPIArgs        []string // appended to mpirun's options, before the command
	// CMA selects Open MPI's cross-memory attach between the ranks of
	// one host (btl_vader_single_copy_mechanism cma) instead of none.
	CMA bool

	// The embedded transport (--gloo): the workers are started directly
	// (local hosts) or through ssh (remote ones), not by mpirun; MPIRun,
	// Flavor and MPIArgs are unused. See BuildGlooPlan.
	Gloo bool
	// RendezvousAddr and RendezvousPort are where the workers reach the
	// launcher's rendezvous server.
	RendezvousAddr string
	RendezvousPort int
	// Secret is the job's key (secret.New), new for every job.
	Secret config.Secret
	// Dir is the directory remote workers start in (the launcher's).
	Dir string
	// SocketDir is the job's directory for the Unix sockets of its local
	// workers (GOHOROVOD_GLOO_SOCKET_DIR; see jobSocketDir).
	SocketDir string
}

// Plan is what the launcher will execute: Argv (Argv[0] is mpirun) with Env
// as mpirun's environment.
type Plan struct {
	Argv []string
	Env  []string
	// VaderDir is the job's own directory for Open MPI's shared-memory
	// segments (EnvVaderDir), which Run makes for a job on this host
	// alone and removes when it ends; "": Open MPI's default.
	VaderDir string
	// NP is the number of ranks.
	NP int
}

// AllLocal reports whether every host is this machine.
func (s Spec) AllLocal() bool {
	for _, h := range s.Hosts {
		if s.IsLocal == nil || !s.IsLocal(h.Name) {
			return false
		}
	}
	return true
}

// usedHosts is the prefix of hosts that get at least one process.
func usedHosts(hosts []Host, np int) []Host {
	var out []Host
	for _, h := range hosts {
		if np <= 0 {
			break
		}
		out = append(out, h)
		np -= h.Slots
	}
	return out
}

// BuildPlan computes the mpirun command and environment for s. It starts
// nothing and reads nothing but s.
func BuildPlan(s Spec) (Plan, error) {
	if s.NP <= 0 {
		return Plan{}, usagef("-np must be at least 1 (got %d)", s.NP)
	}
	if len(s.Command) == 0 {
		return Plan{}, usagef("no program given: gohorovodrun -np 4 ./train [args...]")
	}
	if _, err := Assign(s.Hosts, s.NP); err != nil {
		return Plan{}, err
	}
	if err := s.Config.Validate(); err != nil {
		return Plan{}, usagef("%v", err)
	}
	env := workerEnv(s)
	mpirun := s.MPIRun
	if mpirun == "" {
		mpirun = "mpirun"
	}
	argv := []string{mpirun}
	hosts := usedHosts(s.Hosts, s.NP)
	switch s.Flavor {
	case OpenMPI:
		argv = append(argv, openMPIArgs(s, env, hosts)...)
	case MPICH, IntelMPI:
		args, err := hydraArgs(s, hosts)
		if err != nil {
			return Plan{}, err
		}
		argv = append(argv, args...)
	default:
		return Plan{}, fmt.Errorf("cannot build a command for %s", s.Flavor)
	}
	argv = append(argv, s.MPIArgs...)
	argv = append(argv, s.Command...)
	return Plan{Argv: argv, Env: env, NP: s.NP}, nil
}

// openMPIArgs are Open MPI's mpirun options for the job: the hosts used,
// the transports, ssh, the interfaces, and the variables to export (of
// the workers' environment env).
func openMPIArgs(s Spec, env []string, hosts []Host) []string {
	var argv []string
	local := s.AllLocal()
	if s.Root {
		argv = append(argv, "--allow-run-as-root")
	}
	argv = append(argv, "--tag-output", "-np", strconv.Itoa(s.NP), "-H", joinHosts(hosts, true))
	argv = append(argv, "--bind-to", "none", "--map-by", "slot")
	if local && s.CPUs > 0 && s.NP > s.CPUs {
		argv = append(argv, "--oversubscribe")
	}
	if local {
		// One node: shared memory only. Leaving the TCP transport out
		// shortens every job's start-up (Open MPI probes its
		// interfaces). Cross-memory attach stays off unless asked for:
		// some containers forbid it, and whether it is faster on one
		// node has depended on the machine and its load
		// (docs/BENCHMARKS.md).
		// gohorovodrun --mpi-single-copy=cma or auto selects it where
		// ProbeCMA finds that it works.
		mech := "none"
		if s.CMA {
			mech = "cma"
		}
		argv = append(argv, "-mca", "pml", "ob1", "-mca", "btl", "self,vader",
			"-mca", "btl_vader_single_copy_mechanism", mech)
	} else {
		// As horovodrun: TCP for MPI between nodes (NCCL still uses
		// InfiniBand/RoCE).
		argv = append(argv, "-mca", "pml", "ob1", "-mca", "btl", "^openib")
		argv = append(argv, acrossNodesMCA(env, s.MPIArgs)...)
	}
	if ssh := sshArgs(s); ssh != "" {
		argv = append(argv, "-mca", "plm_rsh_args", ssh)
	}
	if len(s.NICs) > 0 {
		nics := strings.Join(s.NICs, ",")
		argv = append(argv, "-mca", "btl_tcp_if_include", nics, "-x", "NCCL_SOCKET_IFNAME="+nics)
		if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, config.EnvGlooIface+"=") }) {
			// The runtime's TCP ring for host tensors
			// (HOROVOD_CPU_OPERATIONS) listens there too.
			argv = append(argv, "-x", config.EnvGlooIface+"="+s.NICs[0])
		}
	}
	if s.OutputFilename != "" {
		argv = append(argv, "--output-filename", s.OutputFilename)
	}
	if len(hosts) >= 64 {
		argv = append(argv, "-mca", "plm_rsh_no_tree_spawn", "true",
			"-mca", "plm_rsh_num_concurrent", strconv.Itoa(len(hosts)))
	}
	for _, k := range exportable(env) {
		argv = append(argv, "-x", k)
	}
	return argv
}

// hydraArgs are MPICH's or Intel MPI's (Hydra's) mpirun options for the
// job.
func hydraArgs(s Spec, hosts []Host) ([]string, error) {
	var argv []string
	argv = append(argv, "-l", "-np", strconv.Itoa(s.NP))
	if s.Flavor == MPICH {
		argv = append(argv, "-hosts", joinHosts(hosts, true), "-bind-to", "none", "-map-by", "slot")
	} else {
		for _, h := range hosts[1:] {
			if h.Slots != hosts[0].Slots {
				return nil, usagef("Intel MPI needs the same slot count on every host (got %s); use MPICH or Open MPI for uneven hosts",
					joinHosts(hosts, true))
			}
		}
		argv = append(argv, "-ppn", strconv.Itoa(hosts[0].Slots), "-hosts", joinHosts(hosts, false))
	}
	if ssh := sshArgs(s); ssh != "" {
		argv = append(argv, "-bootstrap", "ssh", "-bootstrap-exec-args", ssh)
	}
	if len(s.NICs) > 1 {
		return nil, usagef("%s takes one --network-interface (got %s)", s.Flavor, strings.Join(s.NICs, ","))
	}
	if len(s.NICs) == 1 {
		argv = append(argv, "-iface", s.NICs[0], "-genv", "NCCL_SOCKET_IFNAME", s.NICs[0])
	}
	if s.OutputFilename != "" {
		argv = append(argv, "-outfile-pattern", s.OutputFilename+"/rank.%r.stdout",
			"-errfile-pattern", s.OutputFilename+"/rank.%r.stderr")
	}
	// Hydra passes the whole environment on by default; name the knobs
	// anyway so that the command says what the workers get.
	for _, kv := range s.Config.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		argv = append(argv, "-genv", k, v)
	}
	return argv, nil
}

// joinHosts writes hosts as "h1:4,h2:4", or "h1,h2" without slots.
func joinHosts(hosts []Host, slots bool) string {
	parts := make([]string, len(hosts))
	for i, h := range hosts {
		parts[i] = h.Name
		if slots {
			parts[i] = h.String()
		}
	}
	return strings.Join(parts, ",")
}

func sshArgs(s Spec) string {
	var a []string
	if s.SSHPort > 0 {
		a = append(a, "-p", strconv.Itoa(s.SSHPort))
	}
	if s.SSHIdentity != "" {
		a = append(a, "-i", s.SSHIdentity)
	}
	return strings.Join(a, " ")
}

// workerEnv is mpirun's environment: the launcher's, with every variable
// of runtime/config replaced by the Config's values (so that a stale
// HOROVOD_* in the caller's shell cannot disagree with the flags), and
// GOHOROVOD_LAUNCHER naming this launcher.
func workerEnv(s Spec) []string {
	drop := map[string]bool{}
	for _, n := range config.Names() {
		drop[n] = true
	}
	var env []string
	for _, kv := range s.Environ {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			env = append(env, kv)
		}
	}
	cfg := s.Config
	cfg.Launcher = s.Launcher // this launcher, never one from the caller's environment
	return append(env, cfg.Environ()...)
}

// exportable lists, sorted, the variables of env that Open MPI should pass
// to remote workers with -x: all of them, as horovodrun does, except
// shell-internal ones, CUDA_VISIBLE_DEVICES (each host has its own), and
// the MPI launcher's own variables (OMPI_*, PMIX_*, PMI_*), which would
// confuse the workers' MPI.
func exportable(env []string) []string {
	seen := map[string]bool{}
	var keys []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "" || seen[k],
			k == "_", k == "OLDPWD", k == "PWD", k == "SHLVL",
			strings.HasPrefix(k, "BASH_FUNC_"),
			strings.HasSuffix(k, "CUDA_VISIBLE_DEVICES"),
			strings.HasPrefix(k, "OMPI_"), strings.HasPrefix(k, "PMIX_"), strings.HasPrefix(k, "PMI_"):
			continue
		}
		seen[k] = true
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ShellQuote writes argv as one line a POSIX shell would split back into
// argv (for --verbose and --dry-run).
func ShellQuote(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = quote(a)
	}
	return strings.Join(parts, " ")
}

func quote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:,=+@%^", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// SplitArgs splits a --mpi-args value the way a POSIX shell would (single
// and double quotes, backslash escapes), without expanding anything.
func SplitArgs(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf(`unterminated " in %q`, s)
			}
			inWord = true
		case c == '\\':
			if i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			}
			inWord = true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

// acrossNodesMCA returns the Open MPI parameters the launcher sets for a
// job across hosts, as its workers would set them before MPI_Init
// (mpi.MPISettings, which documents why): no yielding in the progress
// loop, and the ring allreduce. Each is left out where the user's
// environment (OMPI_MCA_NAME) or --mpi-args already name it; the two of
// the algorithm go together.
func acrossNodesMCA(env, mpiArgs []string) []string {
	chosen := func(name string) bool {
		for _, kv := range env {
			if strings.HasPrefix(kv, "OMPI_MCA_"+name+"=") {
				return true
			}
		}
		for _, a := range mpiArgs {
			if a == name {
				return true
			}
		}
		return false
	}
	var out []string
	if !chosen("mpi_yield_when_idle") {
		out = append(out, "-mca", "mpi_yield_when_idle", "0")
	}
	if !chosen("coll_tuned_use_dynamic_rules") && !chosen("coll_tuned_allreduce_algorithm") {
		out = append(out, "-mca", "coll_tuned_use_dynamic_rules", "1", "-mca", "coll_tuned_allreduce_algorithm", "4")
	}
	return out
}
