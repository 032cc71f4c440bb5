//go:build !unix

package main

// cpuSeconds cannot read a process's CPU time here: the report then
// leaves out cpu_ms_per_sample.
func cpuSeconds() (float64, bool) { return 0, false }
