package elastic

import (
	"bufio"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Host is one machine that discovery reported and the number of slots
// (worker processes) it may run.
type Host struct {
	Name  string
	Slots int
}

// String implements fmt.Stringer: "name:slots".
func (h Host) String() string { return h.Name + ":" + strconv.Itoa(h.Slots) }

// hostName is what horovodrun accepts as a host name.
var hostName = regexp.MustCompile(`^[\w.-]+$`)

// ParseDiscovery reads the discovery script's standard output: one host per
// line, "host:slots" or a bare "host", which gets slotsPerHost slots
// (--slots-per-host). Blank lines are skipped and empty output is allowed
// (no hosts yet). A malformed line, a slot count that is not a positive
// number, a bare host without slotsPerHost, or a host listed twice is an
// error that names the line.
func ParseDiscovery(out string, slotsPerHost int) ([]Host, error) {
	hosts := []Host{}
	seen := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		name, n, hasSlots := strings.Cut(text, ":")
		if !hostName.MatchString(name) {
			return nil, fmt.Errorf("elastic: discovery output line %d %q: want host or host:slots (host made of letters, digits, '.', '-' and '_')", line, text)
		}
		slots := slotsPerHost
		if hasSlots {
			v, err := strconv.Atoi(n)
			if err != nil || v <= 0 {
				return nil, fmt.Errorf("elastic: discovery output line %d %q: the slot count must be a positive number", line, text)
			}
			slots = v
		} else if slotsPerHost <= 0 {
			return nil, fmt.Errorf("elastic: discovery output line %d %q: no slot count, and --slots-per-host is not set", line, text)
		}
		if first, dup := seen[name]; dup {
			return nil, fmt.Errorf("elastic: discovery output line %d %q: host %s is already listed on line %d", line, text, name, first)
		}
		seen[name] = line
		hosts = append(hosts, Host{Name: name, Slots: slots})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("elastic: reading discovery output: %w", err)
	}
	return hosts, nil
}

// DiscoveryError is a failed run of the discovery script.
type DiscoveryError struct {
	// Script is the discovery script as given to the launcher.
	Script string
	// ExitCode is the script's exit status.
	ExitCode int
	// Err is further detail (unreadable output, a script that could not be
	// started), or nil.
	Err error
}

// Error implements the error interface with Horovod's text.
func (e *DiscoveryError) Error() string {
	s := fmt.Sprintf("Failed to execute discovery script: %s. Exit code: %d", e.Script, e.ExitCode)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the detail, if any.
func (e *DiscoveryError) Unwrap() error { return e.Err }
