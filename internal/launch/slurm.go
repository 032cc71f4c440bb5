package launch

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gohorovod/gohorovod/internal/job/origin"
)

// SLURM's variables, read when the launcher runs inside an allocation and
// neither -H nor --hostfile is given.
const (
	envSlurmNodeList     = "SLURM_JOB_NODELIST"
	envSlurmTasksPerNode = "SLURM_TASKS_PER_NODE"
	envSlurmNTasksPer    = "SLURM_NTASKS_PER_NODE"
	envSlurmCPUsPerNode  = "SLURM_JOB_CPUS_PER_NODE"
)

// SlurmHosts returns the hosts and slots of the SLURM allocation described
// by lookup's variables, and false when there is no allocation
// (SLURM_JOB_NODELIST unset). Slots come from SLURM_TASKS_PER_NODE
// ("2(x3),1"), else SLURM_NTASKS_PER_NODE (one count for every node), else
// SLURM_JOB_CPUS_PER_NODE.
func SlurmHosts(lookup func(string) (string, bool)) ([]Host, bool, error) {
	list, ok := lookup(envSlurmNodeList)
	if !ok || strings.TrimSpace(list) == "" {
		return nil, false, nil
	}
	names, err := origin.ExpandNodeList(list)
	if err != nil {
		return nil, true, err
	}
	var counts []int
	switch {
	case nonEmpty(lookup, envSlurmTasksPerNode):
		v, _ := lookup(envSlurmTasksPerNode)
		if counts, err = origin.ParseTasksPerNode(v); err != nil {
			return nil, true, fmt.Errorf("%s=%q: %w", envSlurmTasksPerNode, v, err)
		}
	case nonEmpty(lookup, envSlurmNTasksPer):
		v, _ := lookup(envSlurmNTasksPer)
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n <= 0 {
			return nil, true, fmt.Errorf("%s=%q: not a positive number", envSlurmNTasksPer, v)
		}
		for range names {
			counts = append(counts, n)
		}
	case nonEmpty(lookup, envSlurmCPUsPerNode):
		v, _ := lookup(envSlurmCPUsPerNode)
		if counts, err = origin.ParseTasksPerNode(v); err != nil {
			return nil, true, fmt.Errorf("%s=%q: %w", envSlurmCPUsPerNode, v, err)
		}
	default:
		return nil, true, fmt.Errorf("%s is set but none of %s, %s, %s says how many tasks each node runs",
			envSlurmNodeList, envSlurmTasksPerNode, envSlurmNTasksPer, envSlurmCPUsPerNode)
	}
	if len(counts) != len(names) {
		return nil, true, fmt.Errorf("%s lists %d nodes but the task counts cover %d", envSlurmNodeList, len(names), len(counts))
	}
	hosts := make([]Host, len(names))
	for i, n := range names {
		hosts[i] = Host{Name: n, Slots: counts[i]}
	}
	return hosts, true, nil
}

func nonEmpty(lookup func(string) (string, bool), k string) bool {
	v, ok := lookup(k)
	return ok && strings.TrimSpace(v) != ""
}
