// Package cputime reads the CPU time this process has used, which the
// benchmarks and examples report per sample beside wall time: on a shared
// machine CPU seconds stay steady where wall time does not. Profile starts
// the CPU profile that the same programs write on request.
package cputime
