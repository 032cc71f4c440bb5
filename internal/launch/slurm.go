package launch

import (
	"fmt"
	"strconv"
	"strings"
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
	names, err := ExpandNodeList(list)
	if err != nil {
		return nil, true, err
	}
	var counts []int
	switch {
	case nonEmpty(lookup, envSlurmTasksPerNode):
		v, _ := lookup(envSlurmTasksPerNode)
		if counts, err = ParseTasksPerNode(v); err != nil {
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
		if counts, err = ParseTasksPerNode(v); err != nil {
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
