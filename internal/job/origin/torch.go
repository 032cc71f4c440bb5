package origin

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
)

// torch's env:// variables, which torchrun, PyTorchJob and Volcano give
// every worker, and torchrun's own.
const (
	envRank         = "RANK"
	envWorldSize    = "WORLD_SIZE"
	envLocalRank    = "LOCAL_RANK"
	envLocalWorld   = "LOCAL_WORLD_SIZE"
	envGroupRank    = "GROUP_RANK"
	envMasterAddr   = "MASTER_ADDR"
	envMasterPort   = "MASTER_PORT"
	envRunID        = "TORCHELASTIC_RUN_ID"
	envRestartCount = "TORCHELASTIC_RESTART_COUNT"
	envAgentStore   = "TORCHELASTIC_USE_AGENT_STORE"
)

// fromTorch reads torch's env:// contract. RANK and WORLD_SIZE together
// say that it applies; MASTER_ADDR and MASTER_PORT must then be set too.
// Without LOCAL_WORLD_SIZE (PyTorchJob and Volcano run one process per
// pod) every rank is alone on its node.
func fromTorch(lookup func(string) (string, bool)) (Placement, bool, error) {
	rank, hasRank, err1 := intVar(lookup, envRank)
	size, hasSize, err2 := intVar(lookup, envWorldSize)
	if !hasRank || !hasSize {
		return Placement{}, false, nil
	}
	engine := EnvInit
	if _, ok := lookup(envRunID); ok {
		engine = Torchrun
	}
	if err1 != nil || err2 != nil {
		return Placement{}, true, firstErr(err1, err2)
	}
	if size == 0 || rank >= size {
		return Placement{}, true, fmt.Errorf("%s: %s=%d is not a rank of %s=%d", engine, envRank, rank, envWorldSize, size)
	}
	addr, _ := lookup(envMasterAddr)
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return Placement{}, true, fmt.Errorf("%s: %s and %s are set but %s is not: the workers have nowhere to meet", engine, envRank, envWorldSize, envMasterAddr)
	}
	port, err := needInt(lookup, engine, envMasterPort)
	if err != nil {
		return Placement{}, true, err
	}
	if port == 0 || port > 65535 {
		return Placement{}, true, fmt.Errorf("%s: %s=%d is not a port", engine, envMasterPort, port)
	}
	localSize, hasLocalSize, err := intVar(lookup, envLocalWorld)
	if err != nil {
		return Placement{}, true, err
	}
	local, hasLocal, err := intVar(lookup, envLocalRank)
	if err != nil {
		return Placement{}, true, err
	}
	if !hasLocalSize {
		if hasLocal && local != 0 {
			return Placement{}, true, fmt.Errorf("%s: %s=%d without %s: set both", engine, envLocalRank, local, envLocalWorld)
		}
		localSize, local = 1, 0
	}
	if localSize == 0 || local >= localSize {
		return Placement{}, true, fmt.Errorf("%s: %s=%d is not a local rank of %s=%d", engine, envLocalRank, local, envLocalWorld, localSize)
	}
	if size%localSize != 0 {
		return Placement{}, true, fmt.Errorf("%s: %s=%d is not a multiple of %s=%d: gohorovod needs the same number of workers on every node", engine, envWorldSize, size, envLocalWorld, localSize)
	}
	group := rank / localSize
	if g, present, err := intVar(lookup, envGroupRank); err != nil {
		return Placement{}, true, err
	} else if present && g != group {
		return Placement{}, true, fmt.Errorf("%s: %s=%d on node %s=%d with %s=%d: gohorovod needs each node's ranks consecutive (node k holding ranks k·%d to k·%d+%d)",
			engine, envRank, rank, envGroupRank, g, envLocalWorld, localSize, localSize, localSize, localSize-1)
	}
	if rank%localSize != local {
		return Placement{}, true, fmt.Errorf("%s: %s=%d is not local rank %d of its node (%s=%d)", engine, envRank, rank, local, envLocalWorld, localSize)
	}
	slots := make([]rendezvous.Slot, size)
	for r := range slots {
		slots[r] = rendezvous.Slot{Host: "node" + strconv.Itoa(r/localSize), LocalRank: r % localSize}
	}
	master := net.JoinHostPort(addr, strconv.Itoa(port))
	restarts, _, err := intVar(lookup, envRestartCount)
	if err != nil {
		return Placement{}, true, err
	}
	runID, _ := lookup(envRunID)
	agent, _ := lookup(envAgentStore)
	return Placement{
		Engine: engine,
		Rank:   rank, Size: size,
		Slots:  slots,
		Master: master,
		Store:  strings.EqualFold(strings.TrimSpace(agent), "true"),
		Job:    fmt.Sprintf("torch/%s/%s/%d", master, runID, restarts),
	}, true, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
