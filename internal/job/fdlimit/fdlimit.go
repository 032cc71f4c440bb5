package fdlimit

import "fmt"

// Reserve is what a process keeps open besides the job's own descriptors:
// its standard streams, the runtime's poller, log files, listeners, a
// margin for short-lived ones (DNS, /proc).
const Reserve = 64

// Limits are a process's soft and hard limits on open files.
type Limits struct {
	Soft, Hard uint64
}

// Unlimited is the value getrlimit reports for no limit (RLIM_INFINITY).
const Unlimited = ^uint64(0)

// LimitError says that the hard limit on open files is below what the job
// needs, and how to raise it.
type LimitError struct {
	What string // what needs the descriptors, e.g. "a job of 600 workers"
	Need uint64 // descriptors needed, Reserve included
	Have Limits
}

// Error implements the error interface.
func (e *LimitError) Error() string {
	return fmt.Sprintf("%s needs about %d open files, but this process may open at most %d "+
		"(RLIMIT_NOFILE: soft %d, hard %d); raise the hard limit before starting it, "+
		"e.g. `ulimit -Hn %d && ulimit -n %d` in its shell (as root, or via nofile in /etc/security/limits.conf, "+
		"LimitNOFILE= for a systemd service, or the container runtime's --ulimit nofile=%d:%d)",
		e.What, e.Need, e.Have.Hard, e.Have.Soft, e.Have.Hard, e.Need, e.Need, e.Need, e.Need)
}

// Plan decides the soft limit for a process that needs need descriptors
// for what (Reserve is added here) and runs under have: the soft limit is
// kept when it suffices, else raised to the hard limit (not just to the
// need: descriptors cost nothing until opened, and the estimate is one);
// raise says whether setrlimit must be called. When the hard limit is
// below the need, Plan returns a *LimitError and changes nothing.
func Plan(what string, need uint64, have Limits) (soft uint64, raise bool, err error) {
	need += Reserve
	switch {
	case have.Soft == Unlimited || have.Soft >= need:
		return have.Soft, false, nil
	case have.Hard == Unlimited || have.Hard >= need:
		return have.Hard, true, nil
	}
	return have.Soft, false, &LimitError{What: what, Need: need, Have: have}
}
