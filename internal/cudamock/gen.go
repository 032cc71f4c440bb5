//go:build ignore

// gen rebuilds the prebuilt mock libraries of this platform (go generate
// ./internal/cudamock), with gcc, stamped with the sources' hash.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/gohorovod/gohorovod/internal/cudamock"
)

func main() {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen: gcc is needed to rebuild the prebuilt mocks")
		os.Exit(1)
	}
	if _, err := os.Stat(filepath.Join("testdata", "mockcudart.c")); err != nil {
		fmt.Fprintln(os.Stderr, "gen: run it in internal/cudamock (go generate ./internal/cudamock)")
		os.Exit(1)
	}
	dir := filepath.Join("testdata", "prebuilt", cudamock.Platform())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	for i, v := range cudamock.Variants {
		nccl := ""
		if i == 0 {
			nccl = filepath.Join(dir, "libnccl.so")
		}
		if err := cudamock.Compile(gcc, v, filepath.Join(dir, v.Name), nccl); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
	fmt.Println("gen: rebuilt", dir, "from sources", cudamock.SourceHash())
}
