package cputime

import (
	"os"
	"testing"
)

func TestSecondsGrowsWithWork(t *testing.T) {
	before, ok := Seconds()
	if !ok {
		t.Skip("no CPU time on this system")
	}
	x := 0
	for {
		for i := range 1 << 20 {
			x += i
		}
		if after, _ := Seconds(); after > before {
			break
		}
	}
	_ = x
}

func TestProfileWritesAFile(t *testing.T) {
	path := t.TempDir() + "/cpu.prof"
	stop, err := Profile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("profile file: %v, %v", fi, err)
	}
	if _, err := Profile(t.TempDir() + "/no/such/dir/p"); err == nil {
		t.Fatal("a profile in a missing folder started")
	}
}
