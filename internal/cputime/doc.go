// Package cputime reads the CPU time this process has used, which the
// benchmarks and examples report per sample beside wall time: on a shared
// machine CPU seconds stay steady where wall time does not.
package cputime
