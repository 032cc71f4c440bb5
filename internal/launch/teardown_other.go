//go:build !linux

package launch

import "syscall"

// jobProcs, without Linux's /proc, knows mpirun alone.
type jobProcs struct{ root int }

func newJobProcs(root int, _ string) *jobProcs { return &jobProcs{root: root} }

func (j *jobProcs) scan(bool) (jobFailure, bool) { return jobFailure{}, false }

func (j *jobProcs) signal(sig syscall.Signal) { signalGroup(j.root, sig) }

func (j *jobProcs) alive() []int { return nil }

func (j *jobProcs) endedRanks() int { return 0 }
