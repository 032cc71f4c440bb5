package stall

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config holds the inspector's settings (HOROVOD_STALL_CHECK_DISABLE,
// HOROVOD_STALL_CHECK_TIME_SECONDS, HOROVOD_STALL_SHUTDOWN_TIME_SECONDS).
type Config struct {
	Disabled bool
	Warn     time.Duration // report names pending longer than this
	Shutdown time.Duration // shut down when a name is pending longer; 0: never
}

// ShutdownIgnoredWarning is Horovod's message when the shutdown time is set
// below the warning time (the shutdown is then ignored).
const ShutdownIgnoredWarning = "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS is less than HOROVOD_STALL_CHECK_TIME_SECONDS, will not shutdown."

// maxNames is how many names are listed per missing rank.
const maxNames = 6

// Inspector tracks when names were first submitted. Use New.
type Inspector struct {
	cfg       Config
	seen      map[string]time.Time // coordinator: first submission of an uncached name
	cached    map[string]time.Time // this rank: cached requests waiting for others
	lastCheck time.Time
	started   bool
}

// New returns an inspector, and a warning to log when the configuration
// contradicts itself (the shutdown time is then ignored).
func New(cfg Config) (*Inspector, string) {
	warning := ""
	if cfg.Shutdown > 0 && cfg.Shutdown < cfg.Warn {
		warning = ShutdownIgnoredWarning
		cfg.Shutdown = 0
	}
	return &Inspector{cfg: cfg, seen: make(map[string]time.Time), cached: make(map[string]time.Time)}, warning
}

// Enabled reports whether stall checks run at all.
func (s *Inspector) Enabled() bool { return !s.cfg.Disabled && s.cfg.Warn > 0 }

// Observe records the first submission of name (by any rank) at now; later
// calls for a name already observed change nothing.
func (s *Inspector) Observe(name string, now time.Time) {
	if _, ok := s.seen[name]; !ok {
		s.seen[name] = now
	}
}

// Remove forgets name: every rank has submitted it.
func (s *Inspector) Remove(name string) { delete(s.seen, name) }

// ObserveCached records that this rank's cached request for name waits for
// the other ranks, from now on (later calls keep the first time).
func (s *Inspector) ObserveCached(name string, now time.Time) {
	if _, ok := s.cached[name]; !ok {
		s.cached[name] = now
	}
}

// RemoveCached forgets a cached request that was performed. It is called
// for every tensor of every cached cycle, and almost always finds nothing
// to forget: the length check saves hashing the name.
func (s *Inspector) RemoveCached(name string) {
	if len(s.cached) > 0 {
		delete(s.cached, name)
	}
}

// StaleCached returns, sorted, this rank's cached requests that have waited
// longer than the warning time; the runtime invalidates them so that they
// go through full negotiation and become visible to the coordinator. They
// are forgotten here.
func (s *Inspector) StaleCached(now time.Time) []string {
	if !s.Enabled() || len(s.cached) == 0 {
		return nil
	}
	var out []string
	for name, t := range s.cached {
		if now.Sub(t) > s.cfg.Warn {
			out = append(out, name)
		}
	}
	for _, n := range out {
		delete(s.cached, n)
	}
	sort.Strings(out)
	return out
}

// Due reports whether a check should run now: the warning time has passed
// since the last check (or since the first call).
func (s *Inspector) Due(now time.Time) bool {
	if !s.Enabled() {
		return false
	}
	if !s.started {
		s.started = true
		s.lastCheck = now
		return false
	}
	return now.Sub(s.lastCheck) > s.cfg.Warn
}

// Report is the result of a check that found stalled names.
type Report struct {
	// Missing maps each rank that has not submitted some stalled name to
	// those names, sorted.
	Missing map[int][]string
	// Shutdown is true when some name has waited longer than the shutdown
	// time.
	Shutdown bool
	// Diagnosis has one line per missing rank, in rank order: what the rank
	// submitted instead, or that it submitted nothing (see Check).
	Diagnosis []string
	// Message is Horovod's warning text, with one line per missing rank,
	// followed by the Diagnosis lines.
	Message string
}

// Check inspects the coordinator's pending names (name to the ranks that
// have submitted it) in a group of size ranks, and returns a report when
// some name has waited longer than the warning time. Call it when Due.
//
// last[r] is when rank r last submitted anything, as far as the caller
// knows (the zero time: never); a nil or short slice means unknown, and
// then no line calls that rank silent. The report's Message is Horovod's
// text followed by one diagnosis line per missing rank, the first that
// applies:
//   - it submitted pending names that a rank which submitted one of its
//     missing names lacks: the names likely differ across ranks;
//   - it submitted nothing since the oldest name it misses was first seen:
//     it is still busy elsewhere, or on a path without this collective;
//   - otherwise it is active but skips the missing names.
//
// "Submitted" means what reached the coordinator: a request list, or (with
// the runtime's TouchAll) a cached request that every rank agreed on. A
// cached request that waits for other ranks stays on its rank until that
// rank's own inspector moves it to negotiation (StaleCached, after the
// warning time), so a first report may call a rank silent that waits on
// such a request; the silent line says what "nothing" covers, and the next
// report names what the rank submitted.
func (s *Inspector) Check(now time.Time, size int, pending map[string][]int, last []time.Time) (Report, bool) {
	s.lastCheck = now
	missing := make(map[int][]string)
	since := make(map[int]time.Time) // per missing rank, when its oldest missing name was first seen
	stalledRank := make(map[int]bool)
	for name, ranks := range pending {
		first, ok := s.seen[name]
		if !ok {
			s.seen[name] = now
			continue
		}
		age := now.Sub(first)
		if age <= s.cfg.Warn {
			continue
		}
		have := make([]bool, size)
		for _, r := range ranks {
			if r >= 0 && r < size {
				have[r] = true
			}
		}
		for r := 0; r < size; r++ {
			if !have[r] {
				missing[r] = append(missing[r], name)
				if t, ok := since[r]; !ok || first.Before(t) {
					since[r] = first
				}
				if s.cfg.Shutdown > 0 && age > s.cfg.Shutdown {
					stalledRank[r] = true
				}
			}
		}
	}
	if len(missing) == 0 {
		return Report{}, false
	}
	rep := Report{Missing: missing, Shutdown: len(stalledRank) > 0}
	var b strings.Builder
	fmt.Fprintf(&b, "One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than %d seconds. "+
		"This may indicate that different ranks are trying to submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock. \nMissing ranks:",
		int(s.cfg.Warn/time.Second))
	ranks := make([]int, 0, len(missing))
	for r := range missing {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	for _, r := range ranks {
		names := missing[r]
		sort.Strings(names)
		mark := ""
		if stalledRank[r] {
			mark = "!"
		}
		shown := names
		more := ""
		if len(shown) > maxNames {
			shown, more = shown[:maxNames], " ..."
		}
		fmt.Fprintf(&b, "\n%d%s: [%s%s]", r, mark, strings.Join(shown, ", "), more)
	}
	if rep.Shutdown {
		fmt.Fprintf(&b, "\nOne or more rank (marked by \"!\") is stalled for longer than %d seconds. Will shutdown.",
			int(s.cfg.Shutdown/time.Second))
	}
	for _, r := range ranks {
		line := diagnose(now, r, missing[r], since[r], pending, last)
		rep.Diagnosis = append(rep.Diagnosis, line)
		b.WriteString("\n")
		b.WriteString(line)
	}
	rep.Message = b.String()
	return rep, true
}

// diagnose returns the diagnosis line of rank r, which misses the sorted
// names miss, the oldest first seen at since (see Check).
func diagnose(now time.Time, r int, miss []string, since time.Time, pending map[string][]int, last []time.Time) string {
	// The ranks that submitted what r misses; r's pending names that one
	// of them lacks are what r submitted instead.
	others := make(map[int]bool)
	for _, name := range miss {
		for _, q := range pending[name] {
			others[q] = true
		}
	}
	var instead []string
	for name, ranks := range pending {
		if !contains(ranks, r) {
			continue
		}
		for q := range others {
			if !contains(ranks, q) {
				instead = append(instead, name)
				break
			}
		}
	}
	never := list(miss)
	switch {
	case len(instead) > 0:
		sort.Strings(instead)
		return fmt.Sprintf("rank %d submitted %s but never %s: do the names differ across ranks "+
			"(an unnamed op issued in a different order, or a name built from a rank-dependent value)?",
			r, list(instead), never)
	case r >= len(last):
		return fmt.Sprintf("rank %d never submitted %s: does it skip this collective on a condition that differs "+
			"across ranks (a rank-dependent branch, a different number of steps)?", r, never)
	case last[r].Before(since):
		quiet := now.Sub(since)
		if !last[r].IsZero() {
			quiet = now.Sub(last[r])
		}
		return fmt.Sprintf("rank %d submitted nothing for %s (no request negotiated, no cached collective completed): "+
			"is it still loading data, or in a code path that makes no collective (an early exit, a different branch)?",
			r, seconds(quiet))
	default:
		return fmt.Sprintf("rank %d kept submitting other requests (the last %s ago) but never %s: does it skip "+
			"this collective on a condition that differs across ranks (a rank-dependent branch, a different number of steps)?",
			r, seconds(now.Sub(last[r])), never)
	}
}

func contains(ranks []int, r int) bool {
	for _, q := range ranks {
		if q == r {
			return true
		}
	}
	return false
}

// list joins sorted names, the first maxNames of them, saying how many more
// there are.
func list(names []string) string {
	if len(names) <= maxNames {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxNames], ", "), len(names)-maxNames)
}

// seconds writes d as "61 s", or with two significant digits below ten
// seconds ("1.5 s", "0.03 s"): the stall times may be fractional.
func seconds(d time.Duration) string {
	if d >= 10*time.Second {
		return fmt.Sprintf("%d s", int64(d/time.Second))
	}
	return strconv.FormatFloat(d.Seconds(), 'g', 2, 64) + " s"
}
