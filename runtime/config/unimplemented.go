package config

// notImplemented are the variables that FromEnv parses (so that a Horovod
// job's environment is accepted and Environ passes them on) but that nothing
// in gohorovod acts on yet:
//
//   - HOROVOD_MPI_THREADS_DISABLE: the MPI binding always asks for, and
//     requires, MPI_THREAD_MULTIPLE;
//   - the placement variables (HOROVOD_RANK, ..., HOROVOD_CROSS_SIZE) where
//     the controller is not Gloo (Config.Gloo): under MPI the runtime takes
//     its placement from the communicator, never from these. Under Gloo,
//     HOROVOD_HOSTNAME and HOROVOD_LOCAL_RANK name the worker's slot at the
//     rendezvous and the others are checked against its assignment.
//     HOROVOD_HOSTNAME is used under MPI too: it names the node, so that
//     ranks of one machine can form several nodes (see Config.Hostname).
//
// When one of them is implemented, remove it here; if it changes the
// sequence of transport calls, add it to Agreed.
var notImplemented = map[string]bool{
	EnvMPIThreadsDisable: true,
}

// placementVars are the variables that only the Gloo controller uses.
var placementVars = map[string]bool{
	EnvRank:      true,
	EnvSize:      true,
	EnvLocalRank: true,
	EnvLocalSize: true,
	EnvCrossRank: true,
	EnvCrossSize: true,
	EnvElastic:   true,
}

// Unimplemented returns, in Environ's order, the variables that c sets
// (holds a value other than Default's) but that gohorovod does not
// implement yet, so that they have no effect: HOROVOD_MPI_THREADS_DISABLE,
// and the placement variables (HOROVOD_ELASTIC among them) unless c selects
// the Gloo controller (Config.Gloo). The hierarchical collectives and
// autotuning are implemented and not among them. It
// returns nil when c sets none of them. The runtime logs a warning naming
// each at Init, and the launcher warns about the flags behind them.
func (c Config) Unimplemented() []string {
	d := Default()
	var out []string
	for _, list := range [][]knob{knobs, placement} {
		for _, k := range list {
			unused := notImplemented[k.env] || placementVars[k.env] && !c.Gloo()
			if unused && k.format(&c) != k.format(&d) {
				out = append(out, k.env)
			}
		}
	}
	return out
}
