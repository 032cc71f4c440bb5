package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Setting is one value that every rank of a job must hold alike, named the
// way the user sets it: a variable (HOROVOD_FUSION_THRESHOLD) or an Init
// option (hvd.WithChunkBytes), with the value as that variable is written.
type Setting struct {
	Name  string // e.g. HOROVOD_FUSION_THRESHOLD, or hvd.WithChunkBytes
	Value string // e.g. 4194304
}

// Agreed returns the knobs of c that every rank must hold alike, named by
// their variables and written as Environ writes them, in a fixed order. The
// runtime compares them across ranks at Init (see CheckAgreement) and
// refuses to start when they differ.
//
// A knob belongs here when ranks that differ in it would make different
// transport calls, or would silently run with tuning other than what the
// user asked for:
//
//   - HOROVOD_FUSION_THRESHOLD: every rank plans its own fused responses
//     from the same response list; different thresholds fuse differently
//     and the ranks' allreduces no longer match.
//   - HOROVOD_CACHE_CAPACITY: the per-cycle agreement allreduce carries one
//     bit per cache entry, and eviction depends on the capacity.
//   - HOROVOD_HIERARCHICAL_ALLREDUCE and HOROVOD_HIERARCHICAL_ALLGATHER:
//     they change which communicators a fused response travels through.
//   - HOROVOD_DYNAMIC_PROCESS_SETS: a rank without it refuses AddProcessSet
//     while the others wait for it in the registration.
//   - HOROVOD_AUTOTUNE: while tuning, every cycle starts with rank 0's
//     broadcast of the setting, which every rank must take part in.
//   - HOROVOD_CYCLE_TIME: the ranks meet in every cycle's agreement
//     allreduce, so the slowest cycle sets everyone's pace and a different
//     value on one rank silently changes the whole job's tuning.
//   - GOHOROVOD_STATIC_SCHEDULE: a rank that locks a schedule exchanges
//     headers where the others run the agreement allreduce.
//   - GOHOROVOD_AGREEMENT_SLEEP_MAX: 0 makes the agreement a blocking
//     MPI_Allreduce, any other value an MPI_Iallreduce, and MPI does not
//     match a blocking collective with a nonblocking one: ranks that
//     differ would wait for ever in their first agreement.
//   - GOHOROVOD_AGREEMENT_DOORBELL: setting the doorbell up is collective,
//     and a rank without one would leave its node's peers sleeping on it.
//   - GOHOROVOD_EMBEDDED_ALLGATHER and GOHOROVOD_EMBEDDED_ALLREDUCE: ranks
//     that run different algorithms for one collective wait for frames
//     that the others never send.
//
// Left out, because each rank's value changes only what that rank does
// alone or what rank 0 decides for all (the protocol already carries the
// decision): the timeline (rank 0 writes it), the stall inspector's
// settings (rank 0 decides warnings and the shutdown, and a stale cached
// tensor on any rank is invalidated through the agreement allreduce, which
// every rank joins whatever its own settings), the log settings,
// and the
// knobs that are not implemented yet (see Unimplemented: a knob that comes
// to change the calls or the pace joins this list when it is implemented,
// as autotuning and the hierarchical knobs did).
func (c Config) Agreed() []Setting {
	out := make([]Setting, 0, len(agreed))
	for _, k := range knobs {
		if agreed[k.env] {
			out = append(out, Setting{Name: k.env, Value: k.format(&c)})
		}
	}
	return out
}

var agreed = map[string]bool{
	EnvFusionThreshold:       true,
	EnvCycleTime:             true,
	EnvCacheCapacity:         true,
	EnvHierarchicalAllreduce: true,
	EnvHierarchicalAllgather: true,
	EnvDynamicProcessSets:    true,
	EnvAutotune:              true,
	EnvStaticSchedule:        true,
	EnvAgreementSleepMax:     true,
	EnvAgreementDoorbell:     true,
	EnvEmbeddedAllgather:     true,
	EnvEmbeddedAllreduce:     true,
}

// Absent is the value a Disagreement gives a rank whose settings do not
// name the knob (a rank built from other sources).
const Absent = "(absent)"

// Disagreement is one knob that the ranks do not hold alike.
type Disagreement struct {
	Name   string   // the variable or option
	Values []string // Values[r] is rank r's value (Absent where rank r has none)
}

// AgreementError reports the knobs that differ across ranks, with every
// rank's value. Its message starts "ranks disagree on"; the runtime wraps it
// in its initialization error.
type AgreementError struct {
	Knobs []Disagreement // in rank 0's order, then those only other ranks name
}

// maxRuns bounds how many runs of ranks one knob's part of the message
// lists.
const maxRuns = 16

// Error implements the error interface. Consecutive ranks with one value
// are written as a range: "ranks disagree on HOROVOD_FUSION_THRESHOLD:
// ranks 0-2: 4194304, rank 3: 1048576 (every rank must be started with the
// same value)".
func (e *AgreementError) Error() string {
	var b strings.Builder
	b.WriteString("ranks disagree on ")
	for i, d := range e.Knobs {
		if i > 0 {
			b.WriteString("; on ")
		}
		b.WriteString(d.Name)
		b.WriteString(": ")
		writeRuns(&b, d.Values)
	}
	if len(e.Knobs) > 1 {
		b.WriteString(" (every rank must be started with the same values)")
	} else {
		b.WriteString(" (every rank must be started with the same value)")
	}
	return b.String()
}

// writeRuns writes "ranks 0-2: a, rank 3: b", at most maxRuns runs.
func writeRuns(b *strings.Builder, values []string) {
	runs := 0
	for lo := 0; lo < len(values); {
		hi := lo
		for hi+1 < len(values) && values[hi+1] == values[lo] {
			hi++
		}
		if runs == maxRuns {
			fmt.Fprintf(b, ", and %d more ranks", len(values)-lo)
			return
		}
		if runs > 0 {
			b.WriteString(", ")
		}
		if hi == lo {
			b.WriteString("rank " + strconv.Itoa(lo))
		} else {
			fmt.Fprintf(b, "ranks %d-%d", lo, hi)
		}
		b.WriteString(": " + quoteValue(values[lo]))
		runs++
		lo = hi + 1
	}
}

// quoteValue leaves plain values (numbers, names) as they are and quotes
// anything else, so that an empty or odd value is visible in the message.
func quoteValue(v string) string {
	if v == Absent {
		return v
	}
	if v == "" {
		return `""`
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.+:/", r)) {
			return strconv.Quote(v)
		}
	}
	return v
}

// CheckAgreement compares ranks[r], rank r's settings (as Agreed and the
// runtime's own give them, carried between ranks by the runtime), across
// every rank and returns an *AgreementError naming each knob whose value is
// not the same on every rank, with each rank's value, or nil when they all
// agree. Knobs are reported in rank 0's order, then those only other ranks
// name.
func CheckAgreement(settings [][]Setting) error {
	ranks := make([]map[string]string, len(settings))
	var names []string
	known := map[string]bool{}
	for r, s := range settings {
		ranks[r] = make(map[string]string, len(s))
		for _, x := range s {
			ranks[r][x.Name] = x.Value
			if !known[x.Name] {
				known[x.Name] = true
				names = append(names, x.Name)
			}
		}
	}
	var e AgreementError
	for _, name := range names {
		values := make([]string, len(ranks))
		same := true
		for r, m := range ranks {
			v, ok := m[name]
			if !ok {
				v = Absent
			}
			values[r] = v
			same = same && v == values[0]
		}
		if !same {
			e.Knobs = append(e.Knobs, Disagreement{Name: name, Values: values})
		}
	}
	if len(e.Knobs) > 0 {
		return &e
	}
	return nil
}
