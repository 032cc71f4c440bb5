package cputime

import (
	"os"
	"runtime/pprof"
)

// Profile starts a CPU profile written to path and returns what stops it
// and closes the file (the profile's size or the close's error).
func Profile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
