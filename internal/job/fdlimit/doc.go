// Package fdlimit sizes a process's limit on open files (RLIMIT_NOFILE)
// to what a job needs of it: a launcher of hundreds of workers holds pipes
// for their output and the rendezvous' connections; a rendezvous or store
// serving thousands of ranks holds one connection per rank.
//
// The decision is pure: Plan takes the need and the current soft and hard
// limits and says what to set the soft limit to, or, when even the hard
// limit is too low, returns a *LimitError that names the limit, the need
// and how to raise it (ulimit -n, limits.conf). Ensure is its edge: it
// reads the limits, applies the plan with setrlimit, and returns the
// limit it leaves in force.
//
// Go (1.19 and later) already raises the soft limit to the hard one when a
// program starts, and gives the original soft limit back to the programs
// it runs; Ensure still checks, since a process may run under a lower
// limit it set itself, and it is where the need is compared with the hard
// limit, which only the user or root can raise.
package fdlimit
