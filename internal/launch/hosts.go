package launch

import (
	"bufio"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
)

// Host is one machine and the number of processes it may run.
type Host struct {
	Name  string
	Slots int
}

// String implements fmt.Stringer.
func (h Host) String() string { return h.Name + ":" + strconv.Itoa(h.Slots) }

// hostEntry is horovodrun's pattern for one -H entry.
var hostEntry = regexp.MustCompile(`^[\w.-]+:[0-9]+$`)

// ParseHosts reads a -H value, "h1:4,h2:4". A name without ":N" is refused,
// as horovodrun does; so is a repeated name or a zero slot count.
func ParseHosts(s string) ([]Host, error) {
	var hosts []Host
	seen := map[string]bool{}
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if !hostEntry.MatchString(e) {
			return nil, usagef("invalid -H entry %q: each entry must be host:slots, e.g. -H worker-0:2,worker-1:2", e)
		}
		name, n, _ := strings.Cut(e, ":")
		slots, err := strconv.Atoi(n)
		if err != nil || slots <= 0 {
			return nil, usagef("invalid -H entry %q: the slot count must be a positive number", e)
		}
		if seen[name] {
			return nil, usagef("invalid -H value %q: host %s is listed twice; give it once with the total slot count", s, name)
		}
		seen[name] = true
		hosts = append(hosts, Host{Name: name, Slots: slots})
	}
	return hosts, nil
}

// ParseHostfile reads a hostfile: one host per line, "host slots=N" (or a
// bare "host" for one slot; Open MPI's "max_slots=" is ignored); blank lines
// and "#" comments are skipped. name is used in error messages.
func ParseHostfile(r io.Reader, name string) ([]Host, error) {
	var hosts []Host
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		h := Host{Name: fields[0], Slots: 1}
		if !hostEntry.MatchString(h.Name + ":1") {
			return nil, usagef("%s:%d: %q is not a host name", name, line, h.Name)
		}
		for _, f := range fields[1:] {
			k, v, ok := strings.Cut(f, "=")
			switch {
			case ok && k == "slots":
				n, err := strconv.Atoi(v)
				if err != nil || n <= 0 {
					return nil, usagef("%s:%d: %q: slots must be a positive number (write: %s slots=4)", name, line, f, h.Name)
				}
				h.Slots = n
			case ok && k == "max_slots":
			default:
				return nil, usagef("%s:%d: unexpected %q (write: %s slots=4)", name, line, f, h.Name)
			}
		}
		if i, dup := seen[h.Name]; dup {
			hosts[i].Slots += h.Slots
			continue
		}
		seen[h.Name] = len(hosts)
		hosts = append(hosts, h)
	}
	if err := sc.Err(); err != nil {
		return nil, usagef("cannot read hostfile %s: %v", name, err)
	}
	if len(hosts) == 0 {
		return nil, usagef("hostfile %s lists no hosts (write one line per host: worker-0 slots=4)", name)
	}
	return hosts, nil
}

// TotalSlots is the sum of the hosts' slots.
func TotalSlots(hosts []Host) int {
	n := 0
	for _, h := range hosts {
		n += h.Slots
	}
	return n
}

// Slot is one process's placement, as horovodrun's get_host_assignments
// computes it.
type Slot struct {
	Host      string
	Rank      int
	LocalRank int
	LocalSize int
	CrossRank int
	CrossSize int
	Size      int
}

// Assign places np processes on hosts, filling each host's slots in order
// before the next host. The local rank is the index on the host; the cross
// rank is the index of the host among the hosts that have a process with
// that local rank (so hosts with fewer processes give smaller cross sizes
// for higher local ranks).
func Assign(hosts []Host, np int) ([]Slot, error) {
	if total := TotalSlots(hosts); np > total {
		return nil, usagef("requested more processes (%d) than there are available slots (%d): lower -np or add slots to -H/--hostfile", np, total)
	}
	var expect []rendezvous.Slot
	for _, h := range hosts {
		for lr := 0; lr < h.Slots && len(expect) < np; lr++ {
			expect = append(expect, rendezvous.Slot{Host: h.Name, LocalRank: lr})
		}
	}
	// One implementation of horovodrun's rules, shared with the
	// rendezvous server that answers the workers of a --gloo job.
	as, err := rendezvous.Assign(expect)
	if err != nil {
		return nil, usagef("%v", err)
	}
	slots := make([]Slot, len(as))
	for i, a := range as {
		slots[i] = Slot{Host: expect[i].Host, Rank: a.Rank, LocalRank: a.LocalRank, LocalSize: a.LocalSize,
			CrossRank: a.CrossRank, CrossSize: a.CrossSize, Size: a.Size}
	}
	return slots, nil
}

// EnvOMPIHostfile is Open MPI's default hostfile parameter, which the
// Kubeflow MPI Operator sets on an MPIJob's launcher pod (to
// /etc/mpi/hostfile, "host slots=N" lines): the launcher reads the hosts
// from it when neither -H nor --hostfile is given.
const EnvOMPIHostfile = "OMPI_MCA_orte_default_hostfile"

// mpiHostfile is the file EnvOMPIHostfile names, or "".
func mpiHostfile(lookup func(string) (string, bool)) string {
	v, _ := lookup(EnvOMPIHostfile)
	return strings.TrimSpace(v)
}
