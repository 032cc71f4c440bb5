package launch

import (
	"errors"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/gohorovod/gohorovod/runtime/config"
)

// GlooWorker is one worker of a job on the embedded transport, as the
// launcher will start it: Argv with Env as its environment. A local worker
// is the program itself; a remote one is ssh running remoteScript on its
// host.
type GlooWorker struct {
	Slot   Slot
	Remote bool
	Argv   []string
	Env    []string
	// Stdin is written to the process's standard input first; the input
	// then stays open while the process runs (a remote worker is stopped
	// when it closes). "" for local workers: their input is /dev/null.
	Stdin string
}

// BuildGlooPlan computes, for every slot of s, the command and the
// environment of its worker. It starts nothing and reads nothing but s.
//
// Each worker's environment is the launcher's (less every variable of
// runtime/config), then the Config's knobs, then the worker's own contract
// (docs/EMBEDDED.md): HOROVOD_CONTROLLER=gloo, HOROVOD_CPU_OPERATIONS=gloo,
// HOROVOD_GLOO_RENDEZVOUS_ADDR and _PORT, HOROVOD_HOSTNAME (the host as -H
// names it), HOROVOD_RANK, _SIZE, HOROVOD_LOCAL_RANK, _SIZE,
// HOROVOD_CROSS_RANK, _SIZE, GOHOROVOD_LAUNCHER, GOHOROVOD_SECRET, and with
// --network-interface HOROVOD_GLOO_IFACE (the first) and
// NCCL_SOCKET_IFNAME (all). A remote worker gets the same variables on the
// ssh command line (env K=V ... program, as horovodrun does), less the
// launcher's host-specific ones (HOME, USER, SSH_*, ...), and its secret
// on ssh's standard input, so that it appears in no process list.
func BuildGlooPlan(s Spec) ([]GlooWorker, error) {
	if s.NP <= 0 {
		return nil, usagef("-np must be at least 1 (got %d)", s.NP)
	}
	if len(s.Command) == 0 {
		return nil, usagef("no program given: gohorovodrun -np 4 ./train [args...]")
	}
	if s.RendezvousAddr == "" || s.RendezvousPort == 0 || s.Secret == "" {
		return nil, errors.New("launch: the Gloo plan needs the rendezvous address, port and secret")
	}
	slots, err := Assign(s.Hosts, s.NP)
	if err != nil {
		return nil, err
	}
	if err := s.Config.Validate(); err != nil {
		return nil, usagef("%v", err)
	}
	base, remoteBase := glooBase(s)
	out := make([]GlooWorker, 0, len(slots))
	for _, sl := range slots {
		cfg := s.Config
		cfg.Rank, cfg.Size = sl.Rank, sl.Size
		cfg.LocalRank, cfg.LocalSize = sl.LocalRank, sl.LocalSize
		cfg.CrossRank, cfg.CrossSize = sl.CrossRank, sl.CrossSize
		out = append(out, glooWorker(s, cfg, sl, base, remoteBase))
	}
	return out, nil
}

// glooBase returns the environment every worker starts from: the
// launcher's, less the variables of runtime/config (and NCCL_SOCKET_IFNAME
// with --network-interface, which it then sets), and its selection for
// remote workers.
func glooBase(s Spec) (base, remoteBase []string) {
	drop := map[string]bool{}
	for _, n := range config.Names() {
		drop[n] = true
	}
	if len(s.NICs) > 0 {
		drop["NCCL_SOCKET_IFNAME"] = true
	}
	for _, kv := range s.Environ {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			base = append(base, kv)
		}
	}
	if len(s.NICs) > 0 {
		base = append(base, "NCCL_SOCKET_IFNAME="+strings.Join(s.NICs, ","))
	}
	return base, remoteEnv(base)
}

// glooWorker is the worker of slot sl with the knobs and placement of cfg:
// the program itself on a local host, ssh running remoteScript on a
// remote one (with the secret on its standard input).
func glooWorker(s Spec, cfg config.Config, sl Slot, base, remoteBase []string) GlooWorker {
	cfg.Launcher = s.Launcher
	cfg.Controller, cfg.CPUOperations = config.ControllerGloo, config.ControllerGloo
	cfg.RendezvousAddr, cfg.RendezvousPort = s.RendezvousAddr, s.RendezvousPort
	cfg.Hostname = sl.Host
	cfg.GlooAddr = ""
	if len(s.NICs) > 0 {
		cfg.GlooIface = s.NICs[0]
	}
	cfg.Secret = s.Secret
	w := GlooWorker{Slot: sl}
	if s.IsLocal != nil && s.IsLocal(sl.Host) {
		cfg.GlooSocketDir = s.SocketDir
		w.Argv = append([]string(nil), s.Command...)
		w.Env = append(append([]string(nil), base...), cfg.Environ()...)
		if kv, ok := oversubscribed(base, sl.LocalSize, localCPUs()); ok {
			w.Env = append(w.Env, kv)
		}
		return w
	}
	cfg.Secret = "" // on standard input
	env := append(append([]string(nil), remoteBase...), cfg.Environ()...)
	w.Remote = true
	w.Argv = append(sshArgv(s.SSHPort, s.SSHIdentity, sl.Host), "exec /bin/sh -c "+quote(remoteScript(s.Dir, env, s.Command)))
	w.Env = append([]string(nil), s.Environ...)
	w.Stdin = string(s.Secret) + "\n"
	return w
}

// remoteScript is what a remote worker's ssh runs (with /bin/sh): it
// reads the secret from standard input, starts the program with env in
// the launcher's directory, and stops the program (SIGTERM, SIGKILL 5 s
// later) when standard input ends, which is when the launcher closes it or
// the ssh connection goes; it exits with the program's status (128+n for
// signal n).
func remoteScript(dir string, env, argv []string) string {
	var b strings.Builder
	if dir != "" {
		b.WriteString("cd " + quote(dir) + " >/dev/null 2>&1; ")
	}
	b.WriteString("IFS= read -r " + config.EnvSecret + " || exit 255; export " + config.EnvSecret + "; ")
	b.WriteString("exec 3<&0 </dev/null; ")
	b.WriteString("env")
	for _, kv := range env {
		b.WriteString(" " + quote(kv))
	}
	b.WriteString(" " + ShellQuote(argv) + " 3<&- & p=$!; ")
	b.WriteString("{ cat >/dev/null 2>&1; kill -TERM $p 2>/dev/null; sleep 5; kill -KILL $p 2>/dev/null; } <&3 3<&- & w=$!; ")
	b.WriteString("exec 3<&-; wait $p; s=$?; kill $w 2>/dev/null; exit $s")
	return b.String()
}

// hostSpecific are the launcher's variables that describe its own host or
// login, and are not passed to remote workers.
var hostSpecific = map[string]bool{
	"HOSTNAME": true, "HOME": true, "USER": true, "LOGNAME": true, "SHELL": true, "MAIL": true,
	"TERM": true, "DISPLAY": true,
}

// remoteEnv is the part of env passed to remote workers: exportable's
// selection less the host-specific variables, sorted by name.
func remoteEnv(env []string) []string {
	vals := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vals[k] = v
	}
	var out []string
	for _, k := range exportable(env) {
		if hostSpecific[k] || strings.HasPrefix(k, "SSH_") || strings.HasPrefix(k, "XDG_") {
			continue
		}
		out = append(out, k+"="+vals[k])
	}
	sort.Strings(out)
	return out
}

// DescribeGlooPlan writes one line per worker for --dry-run and
// --verbose: its rank and host, the variables of runtime/config that
// differ from the defaults (the secret as [redacted]), and its command.
func DescribeGlooPlan(ws []GlooWorker) []string {
	known := map[string]bool{}
	for _, n := range config.Names() {
		known[n] = true
	}
	def := map[string]bool{}
	for _, kv := range config.Default().Environ() {
		def[kv] = true
	}
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		var parts []string
		if !w.Remote {
			for _, kv := range w.Env {
				k, _, _ := strings.Cut(kv, "=")
				switch {
				case !known[k] || def[kv]:
				case k == config.EnvSecret:
					parts = append(parts, k+"=[redacted]")
				default:
					parts = append(parts, quote(kv))
				}
			}
		}
		line := "[rank " + strconv.Itoa(w.Slot.Rank) + " on " + w.Slot.Host + "] "
		if len(parts) > 0 {
			line += strings.Join(parts, " ") + " "
		}
		out = append(out, line+ShellQuote(w.Argv))
	}
	return out
}

// localCPUs is the number of CPUs of this machine (a variable for tests).
var localCPUs = runtime.NumCPU

// oversubscribed returns GOMAXPROCS=1 for the workers of this machine when
// more of them share it than it has CPUs and env does not set GOMAXPROCS:
// each Go worker would otherwise run as many threads as the machine has
// CPUs, and at hundreds of workers their schedulers' spinning and the
// switches between them take a third of the CPU a step needs (as torchrun
// sets OMP_NUM_THREADS=1 for several workers a node).
func oversubscribed(env []string, localSize, cpus int) (string, bool) {
	if cpus <= 0 || localSize <= cpus {
		return "", false
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "GOMAXPROCS=") {
			return "", false
		}
	}
	return "GOMAXPROCS=1", true
}
