package launch

import (
	"github.com/gohorovod/gohorovod/runtime/config"
)

// unimplementedFlags maps the variables of the knobs that are not
// implemented yet (config.Config.Unimplemented) to the flags that set them.
var unimplementedFlags = map[string]string{
	config.EnvMPIThreadsDisable: "mpi-threads-disable",
}

// knobWarnings returns one warning for each knob of c (the launcher's
// environment, then the flags) that is set but not implemented yet: it
// names the flag when the flag was given, else the variable. The workers
// log their own warnings at Init; these reach the user before the job
// starts, and also under --dry-run.
func knobWarnings(o *Options, c config.Config) []string {
	var out []string
	for _, name := range c.Unimplemented() {
		if flag, ok := unimplementedFlags[name]; ok && o.IsSet(flag) {
			out = append(out, "warning: --"+flag+" ("+name+") is not implemented yet: it has no effect")
			continue
		}
		out = append(out, "warning: "+name+" (from the environment) is not implemented yet: it has no effect")
	}
	return out
}

// withoutPlacement clears the placement variables (HOROVOD_RANK, ...) and
// the other per-job ones (HOROVOD_CONTROLLER, the rendezvous, the secret,
// GOHOROVOD_GLOO_ADDR, GOHOROVOD_GLOO_SOCKET_DIR) that the launcher's own environment may carry: the
// workers learn their placement from MPI or from this launcher's
// rendezvous, one rank's placement exported to every worker would be wrong
// for all but one, and a job never inherits another job's rendezvous or
// key. HOROVOD_GLOO_TIMEOUT_SECONDS and HOROVOD_GLOO_IFACE are kept, and
// HOROVOD_CPU_OPERATIONS, which chooses how an MPI job's host tensors
// travel (--gloo sets it itself).
func withoutPlacement(c config.Config) config.Config {
	c.Rank, c.Size = config.Unset, config.Unset
	c.LocalRank, c.LocalSize = config.Unset, config.Unset
	c.CrossRank, c.CrossSize = config.Unset, config.Unset
	c.Hostname = ""
	c.Controller = ""
	c.RendezvousAddr, c.RendezvousPort = "", 0
	c.GlooAddr, c.GlooSocketDir, c.Secret = "", "", ""
	return c
}
