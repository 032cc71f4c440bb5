//go:build !mpi || !cgo

package main

import (
	"strings"
	"testing"
	"time"
)

// TestNeedsMPI: a build without MPI says how to build it.
func TestNeedsMPI(t *testing.T) {
	err := run(1, 1, time.Millisecond, 1)
	if err == nil || !strings.Contains(err.Error(), "go build -tags mpi") {
		t.Fatalf("run without MPI: %v", err)
	}
}
