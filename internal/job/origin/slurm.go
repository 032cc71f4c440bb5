package origin

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
)

// The variables srun gives every task of a step (SLURM 22.05 and later;
// SLURM_STEPID and SLURM_NTASKS are the older spellings).
const (
	envStepID       = "SLURM_STEP_ID"
	envStepIDOld    = "SLURM_STEPID"
	envJobID        = "SLURM_JOB_ID"
	envProcID       = "SLURM_PROCID"
	envStepTasks    = "SLURM_STEP_NUM_TASKS"
	envNTasks       = "SLURM_NTASKS"
	envLocalID      = "SLURM_LOCALID"
	envNodeID       = "SLURM_NODEID"
	envStepNodeList = "SLURM_STEP_NODELIST"
	envStepPerNode  = "SLURM_STEP_TASKS_PER_NODE"
	// EnvRendezvousPort overrides the port that srun's workers derive
	// from the job and step ids (it is the launcher's variable of the
	// same meaning).
	EnvRendezvousPort = "HOROVOD_GLOO_RENDEZVOUS_PORT"
)

// The ports srun's rank 0 may derive: [portBase, portBase+portSpan).
const (
	portBase = 20000
	portSpan = 20000
)

// SrunPort is the port at which rank 0 of step step of SLURM job job hosts
// the rendezvous: a function of the two ids, so that every task computes
// it alone, and steps that share a node are unlikely to collide.
func SrunPort(job, step int) int {
	h := uint64(job)*1000003 + uint64(step)*7919
	return portBase + int(h%portSpan)
}

// srunBlocks reads the step's nodes and tasks per node and returns the
// nodes, the slots of srun's default block distribution (each node's tasks
// have consecutive ranks, nodes in list order), and the tasks per node as
// the variable spells them.
func srunBlocks(lookup func(string) (string, bool)) ([]string, []rendezvous.Slot, string, error) {
	list, _ := lookup(envStepNodeList)
	perNode, _ := lookup(envStepPerNode)
	if strings.TrimSpace(list) == "" || strings.TrimSpace(perNode) == "" {
		return nil, nil, perNode, fmt.Errorf("srun started this process but %s or %s is not set", envStepNodeList, envStepPerNode)
	}
	nodes, err := ExpandNodeList(list)
	if err != nil {
		return nil, nil, perNode, fmt.Errorf("%s: %w", envStepNodeList, err)
	}
	counts, err := ParseTasksPerNode(perNode)
	if err != nil {
		return nil, nil, perNode, fmt.Errorf("%s=%q: %w", envStepPerNode, perNode, err)
	}
	if len(counts) != len(nodes) {
		return nil, nil, perNode, fmt.Errorf("%s lists %d nodes but %s=%q counts %d", envStepNodeList, len(nodes), envStepPerNode, perNode, len(counts))
	}
	var slots []rendezvous.Slot
	for i, n := range nodes {
		for lr := 0; lr < counts[i]; lr++ {
			slots = append(slots, rendezvous.Slot{Host: n, LocalRank: lr})
		}
	}
	return nodes, slots, perNode, nil
}

// srunRendezvousPort is the port of the job's rendezvous: the one
// GOHOROVOD_RENDEZVOUS_PORT names, else SrunPort's for the job's step.
func srunRendezvousPort(lookup func(string) (string, bool), job, step int) (int, error) {
	p, present, err := intVar(lookup, EnvRendezvousPort)
	switch {
	case err != nil:
		return 0, err
	case !present:
		return SrunPort(job, step), nil
	case p == 0 || p > 65535:
		return 0, fmt.Errorf("%s=%d is not a port", EnvRendezvousPort, p)
	}
	return p, nil
}

// fromSrun reads a task's srun variables. Outside a step (a batch script,
// a shell in an allocation) there are none, and it reports false.
func fromSrun(lookup func(string) (string, bool)) (Placement, bool, error) {
	step, present, err := intVar(lookup, envStepID)
	if !present && err == nil {
		step, present, err = intVar(lookup, envStepIDOld)
	}
	if err != nil {
		// SLURM_STEP_ID is "batch" or "extern" in a job's own steps,
		// which srun did not start.
		return Placement{}, false, nil
	}
	if !present {
		return Placement{}, false, nil
	}
	job, err := needInt(lookup, Srun, envJobID)
	if err != nil {
		return Placement{}, true, err
	}
	rank, err := needInt(lookup, Srun, envProcID)
	if err != nil {
		return Placement{}, true, err
	}
	size, present, err := intVar(lookup, envStepTasks)
	if err == nil && !present {
		size, err = needInt(lookup, Srun, envNTasks)
	}
	if err != nil {
		return Placement{}, true, err
	}
	local, err := needInt(lookup, Srun, envLocalID)
	if err != nil {
		return Placement{}, true, err
	}
	node, err := needInt(lookup, Srun, envNodeID)
	if err != nil {
		return Placement{}, true, err
	}
	nodes, slots, perNode, err := srunBlocks(lookup)
	if err != nil {
		return Placement{}, true, err
	}
	if len(slots) != size || rank >= size {
		return Placement{}, true, fmt.Errorf("srun: %s=%q places %d tasks, but %s says %d (rank %d)", envStepPerNode, perNode, len(slots), envStepTasks, size, rank)
	}
	if node >= len(nodes) || slots[rank].Host != nodes[node] || slots[rank].LocalRank != local {
		return Placement{}, true, fmt.Errorf("srun placed task %d as local task %d of node %d, not as its block distribution would; "+
			"gohorovod needs consecutive ranks on each node: run srun with --distribution=block", rank, local, node)
	}
	port, err := srunRendezvousPort(lookup, job, step)
	if err != nil {
		return Placement{}, true, err
	}
	return Placement{
		Engine: Srun,
		Rank:   rank, Size: size,
		Slots:  slots,
		Master: net.JoinHostPort(nodes[0], strconv.Itoa(port)),
		Job:    fmt.Sprintf("slurm/%d.%d", job, step),
	}, true, nil
}

// ExpandNodeList expands a SLURM host list: "node[01-03,07],gpu5" is
// node01, node02, node03, node07, gpu5. Zero padding follows the lower
// bound's width; several bracket groups in one name expand to their
// product ("r[1-2]n[1-2]" is r1n1, r1n2, r2n1, r2n2).
func ExpandNodeList(s string) ([]string, error) {
	var out []string
	depth, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			switch s[i] {
			case '[':
				depth++
				continue
			case ']':
				depth--
				if depth < 0 {
					return nil, fmt.Errorf("host list %q: unbalanced ']'", s)
				}
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		if depth != 0 {
			return nil, fmt.Errorf("host list %q: unbalanced '['", s)
		}
		part := strings.TrimSpace(s[start:i])
		start = i + 1
		if part == "" {
			continue
		}
		names, err := expandName(part)
		if err != nil {
			return nil, fmt.Errorf("host list %q: %w", s, err)
		}
		out = append(out, names...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("host list %q names no hosts", s)
	}
	return out, nil
}

// expandName expands the first bracket group of one name and recurses on
// the rest.
func expandName(name string) ([]string, error) {
	open := strings.IndexByte(name, '[')
	if open < 0 {
		if strings.ContainsRune(name, ']') {
			return nil, fmt.Errorf("unbalanced ']' in %q", name)
		}
		return []string{name}, nil
	}
	closeAt := strings.IndexByte(name[open:], ']')
	if closeAt < 0 {
		return nil, fmt.Errorf("unbalanced '[' in %q", name)
	}
	closeAt += open
	prefix, body, rest := name[:open], name[open+1:closeAt], name[closeAt+1:]
	tails, err := expandName(rest)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range strings.Split(body, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if lo == "" || err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, fmt.Errorf("bad range %q in %q", r, name)
		}
		if b-a > 1<<16 {
			return nil, fmt.Errorf("range %q in %q is too large", r, name)
		}
		for n := a; n <= b; n++ {
			num := fmt.Sprintf("%0*d", len(lo), n)
			for _, t := range tails {
				out = append(out, prefix+num+t)
			}
		}
	}
	return out, nil
}

// ParseTasksPerNode expands SLURM's compressed count list: "2(x3),1" is
// 2, 2, 2, 1.
func ParseTasksPerNode(s string) ([]int, error) {
	var out []int
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		count, rep := e, "1"
		if i := strings.IndexByte(e, '('); i >= 0 {
			if !strings.HasPrefix(e[i:], "(x") || !strings.HasSuffix(e, ")") {
				return nil, fmt.Errorf("bad entry %q (want N or N(xR))", e)
			}
			count, rep = e[:i], e[i+2:len(e)-1]
		}
		n, err1 := strconv.Atoi(count)
		r, err2 := strconv.Atoi(rep)
		if err1 != nil || err2 != nil || n <= 0 || r <= 0 {
			return nil, fmt.Errorf("bad entry %q (want N or N(xR) with positive numbers)", e)
		}
		if r > 1<<16 {
			return nil, fmt.Errorf("entry %q repeats too often", e)
		}
		for range r {
			out = append(out, n)
		}
	}
	return out, nil
}
