package rendezvous

import (
	"fmt"
	"strconv"
	"strings"
)

// Slot is one place of the job: a host (as the launcher names it, which is
// what HOROVOD_HOSTNAME carries) and a local rank on it.
type Slot struct {
	Host      string
	LocalRank int
}

// String implements fmt.Stringer: "host h2 local rank 1".
func (s Slot) String() string {
	return "host " + s.Host + " local rank " + strconv.Itoa(s.LocalRank)
}

// Member is one worker as the others learn it: its slot and its opaque
// payload (the transport's published addresses, encoded by the runtime).
type Member struct {
	Slot
	Data string
}

// Assignment is what a worker learns at the end of the rendezvous: its
// place in the job, and every member, in rank order.
type Assignment struct {
	Rank, Size           int
	LocalRank, LocalSize int
	CrossRank, CrossSize int
	Members              []Member // Members[r] is rank r
	// Round is the elastic rendezvous round this assignment belongs to
	// (RoundServer, JoinRound); 0 for a fixed job's single rendezvous.
	Round int `json:",omitempty"`
}

// Assign computes the placement of every expected slot, with Members left
// nil: Assign(expect)[i] is the assignment of expect[i], whose rank is i.
// expect must list each host's slots together, with local ranks 0, 1, ...
// in ascending order, and no slot twice; anything else is an error that
// says what is wrong.
func Assign(expect []Slot) ([]Assignment, error) {
	if len(expect) == 0 {
		return nil, fmt.Errorf("rendezvous: no slots expected")
	}
	perHost := map[string]int{} // slots seen so far on each host
	var order []string          // hosts in order of first appearance
	for i, s := range expect {
		if s.Host == "" {
			return nil, fmt.Errorf("rendezvous: slot %d has no host name", i)
		}
		n, seen := perHost[s.Host]
		if seen && expect[i-1].Host != s.Host {
			return nil, fmt.Errorf("rendezvous: the slots of host %s are not listed together (slot %d)", s.Host, i)
		}
		if s.LocalRank != n {
			return nil, fmt.Errorf("rendezvous: slot %d (%v): want local rank %d (local ranks ascend from 0 on each host)", i, s, n)
		}
		if !seen {
			order = append(order, s.Host)
		}
		perHost[s.Host] = n + 1
	}
	// crossRank[h][lr] is the index of host h among the hosts that have
	// local rank lr; crossSize[lr] counts those hosts.
	crossSize := map[int]int{}
	hostIndex := map[string]map[int]int{}
	for _, h := range order {
		hostIndex[h] = map[int]int{}
		for lr := 0; lr < perHost[h]; lr++ {
			hostIndex[h][lr] = crossSize[lr]
			crossSize[lr]++
		}
	}
	out := make([]Assignment, len(expect))
	for i, s := range expect {
		out[i] = Assignment{
			Rank: i, Size: len(expect),
			LocalRank: s.LocalRank, LocalSize: perHost[s.Host],
			CrossRank: hostIndex[s.Host][s.LocalRank], CrossSize: crossSize[s.LocalRank],
		}
	}
	return out, nil
}

// Check compares a with the placement a launcher also gave in the
// environment (HOROVOD_RANK, HOROVOD_SIZE, ...), so that a worker notices a
// launcher and a rendezvous server that disagree. A negative value is not
// checked (config.Unset is -1). The error names every field that differs.
func (a Assignment) Check(rank, size, localRank, localSize, crossRank, crossSize int) error {
	fields := []struct {
		name      string
		got, want int
	}{
		{"rank", a.Rank, rank}, {"size", a.Size, size},
		{"local rank", a.LocalRank, localRank}, {"local size", a.LocalSize, localSize},
		{"cross rank", a.CrossRank, crossRank}, {"cross size", a.CrossSize, crossSize},
	}
	var bad []string
	for _, f := range fields {
		if f.want >= 0 && f.got != f.want {
			bad = append(bad, fmt.Sprintf("%s %d (the environment says %d)", f.name, f.got, f.want))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("rendezvous: the assignment disagrees with the launcher's environment: %s", strings.Join(bad, ", "))
	}
	return nil
}

// MissingError reports slots that had not joined when the rendezvous
// ended: its deadline passed, or the server was closed.
type MissingError struct {
	Missing []Slot // in rank order
	Size    int    // the number of slots expected
	Reason  string // e.g. "timed out"; "" if not known
	// Cause is what ended the rendezvous (context.DeadlineExceeded,
	// ErrClosed), or nil where the error came from the server over the
	// network.
	Cause error
}

// Unwrap returns Cause, for errors.Is.
func (e *MissingError) Unwrap() error { return e.Cause }

// maxNamed bounds the slots an error names one by one.
const maxNamed = 8

// Error implements the error interface, e.g. "rendezvous timed out after
// 30s: host h2 local rank 1 never arrived".
func (e *MissingError) Error() string {
	var b strings.Builder
	b.WriteString("rendezvous")
	if e.Reason != "" {
		b.WriteString(" " + e.Reason)
	}
	b.WriteString(": ")
	for i, s := range e.Missing {
		if i == maxNamed {
			fmt.Fprintf(&b, " and %d more", len(e.Missing)-maxNamed)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s.String())
	}
	b.WriteString(" never arrived")
	if len(e.Missing) > 1 {
		fmt.Fprintf(&b, " (%d of %d workers)", len(e.Missing), e.Size)
	}
	return b.String()
}
