package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gohorovod/gohorovod/internal/scaling"
)

// TestBoundAtTheJobsCoresPerRank: the job's ranks and the bound's
// independent copies run with the same GOMAXPROCS (cores over np), so that
// the bound differs from the job only in communication. The fake program
// prints its GOMAXPROCS as its samples/s.
func TestBoundAtTheJobsCoresPerRank(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	env := []string{scaling.CoreShareEnv(16, 4)}
	prog := []string{"-c", `echo "epoch 1: x $GOMAXPROCS samples/s"`}
	bound, err := independent(env, 3, "sh", prog)
	if err != nil {
		t.Fatal(err)
	}
	if bound != 3*4 {
		t.Fatalf("3 copies summed %v samples/s, want 3 x GOMAXPROCS 4", bound)
	}
	// The launcher is run as LAUNCHER NP PROGRAM ARGS...: this one drops NP
	// and runs the program once.
	launcher := filepath.Join(t.TempDir(), "launcher")
	if err := os.WriteFile(launcher, []byte("#!/bin/sh\nshift\nexec \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := launched(env, launcher, 4, "sh", []string{"-c", `echo "epoch 2: x $GOMAXPROCS samples/s"`})
	if err != nil {
		t.Fatal(err)
	}
	if got != 4 {
		t.Fatalf("the job ran at GOMAXPROCS %v, want 4", got)
	}
}
