package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/internal/launch"
	"github.com/gohorovod/gohorovod/mpi"
)

func main() {
	// The launcher starts a copy of itself beside mpirun as the job's guard.
	if status, ok := launch.GuardMain(); ok {
		os.Exit(status)
	}
	// A closed output pipe (gohorovodrun ... | head) must not kill the
	// launcher while it still owns a running job: writes fail instead, and
	// the launcher goes on to stop and reap mpirun.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	l := launch.NewLauncher(launch.BuildInfo{
		MPIBuiltIn: mpi.Built,
		MPILibrary: mpi.Library,
		MPIVersion: mpi.LibraryVersion,
		GPU:        cuda.Describe,
	})
	err := l.Run(ctx, os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gohorovodrun: %v\n", err)
	}
	stop()
	os.Exit(launch.ExitCode(err))
}
