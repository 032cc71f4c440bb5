//go:build mpi && cgo

package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMPIIdlebench runs a short idlebench under mpirun (scripts/mpitest.sh):
// every rank measures every variant, and rank 0 prints a line for each with
// a CPU share and its ratio to the yardstick's.
func TestMPIIdlebench(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	runErr := run(2, 5, 2*time.Millisecond, 64)
	os.Stdout = stdout
	w.Close()
	var out bytes.Buffer
	io.Copy(&out, r)
	if runErr != nil {
		t.Fatal(runErr)
	}
	if os.Getenv("OMPI_COMM_WORLD_RANK") != "0" {
		return
	}
	for _, v := range variants {
		if !strings.Contains(out.String(), "impl="+v+" cpu_share=") {
			t.Fatalf("no line for %s:\n%s", v, out.String())
		}
	}
	if !strings.Contains(out.String(), "impl=raw-mpi cpu_share=") || !strings.Contains(out.String(), "ratio_to_raw=1.00") {
		t.Fatalf("no yardstick line:\n%s", out.String())
	}
}
