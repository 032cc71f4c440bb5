package origin

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
)

// The engines Detect recognises, as Placement.Engine names them.
const (
	// Srun is a task of a SLURM job step that srun started.
	Srun = "srun"
	// Torchrun is a worker of torchrun (or torch.distributed.launch,
	// torch's elastic agent).
	Torchrun = "torchrun"
	// EnvInit is a process given torch's env:// variables by something
	// other than torchrun: Kubeflow's PyTorchJob, Volcano's pytorch
	// plugin, or a script.
	EnvInit = "env://"
)

// Placement is what a worker learns from the engine that started it.
type Placement struct {
	// Engine is Srun, Torchrun or EnvInit.
	Engine string
	// Rank and Size are the engine's: gohorovod keeps them.
	Rank, Size int
	// Slots[r] is rank r's host and local rank, in rank order, each
	// host's slots together (as rendezvous.Assign wants them). Under srun
	// the hosts are the step's nodes; torch's variables name no hosts, so
	// there each node is "node<GROUP_RANK>".
	Slots []rendezvous.Slot
	// Master is "host:port" where the workers meet.
	Master string
	// Store says that torchrun's agent serves torch's TCPStore at Master:
	// the workers meet through it; otherwise rank 0 hosts gohorovod's
	// rendezvous at Master.
	Store bool
	// Job identifies this job (and this attempt of it, where the engine
	// restarts workers) among the user's jobs: the derived secret and the
	// store's keys depend on it.
	Job string
}

// Me is this worker's slot.
func (p Placement) Me() rendezvous.Slot { return p.Slots[p.Rank] }

// LocalSize is the number of ranks on this worker's host.
func (p Placement) LocalSize() int {
	n := 0
	for _, s := range p.Slots {
		if s.Host == p.Me().Host {
			n++
		}
	}
	return n
}

// Detect reads the variables of the engines it knows through lookup
// (os.LookupEnv in production) and returns this worker's placement, and
// false when no engine it knows started this process. torch's variables
// (RANK and WORLD_SIZE) come before SLURM's, since torchrun may itself run
// in a SLURM step. A variable that is present but wrong, or one missing
// beside the others, is an error naming it.
func Detect(lookup func(string) (string, bool)) (Placement, bool, error) {
	if p, ok, err := fromTorch(lookup); ok || err != nil {
		return p, ok, err
	}
	return fromSrun(lookup)
}

// intVar reads a non-negative integer variable; present reports whether
// it is set at all.
func intVar(lookup func(string) (string, bool), name string) (n int, present bool, err error) {
	v, ok := lookup(name)
	if !ok || strings.TrimSpace(v) == "" {
		return 0, false, nil
	}
	n, err = strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, true, fmt.Errorf("%s=%q is not a non-negative number", name, v)
	}
	return n, true, nil
}

// needInt reads an integer variable that must be there, given that
// engine's other variables are.
func needInt(lookup func(string) (string, bool), engine, name string) (int, error) {
	n, present, err := intVar(lookup, name)
	if err != nil {
		return 0, err
	}
	if !present {
		return 0, fmt.Errorf("%s started this process but %s is not set", engine, name)
	}
	return n, nil
}
