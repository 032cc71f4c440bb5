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
	// SIGTERM, SIGUSR1 and SIGINT ask the job to stop: the first is passed
	// on to the workers, which stop at a step boundary; a second one stops
	// them at once (launch.Launcher.Signals).
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, launch.StopSignals...)
	stop := func() { signal.Stop(sigs) }
	defer stop()
	l := launch.NewLauncher(launch.BuildInfo{
		MPIBuiltIn: mpi.Built,
		MPILibrary: mpi.Library,
		MPIVersion: mpi.LibraryVersion,
		GPU:        cuda.Describe,
	})
	l.Signals = sigs
	err := l.Run(context.Background(), os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gohorovodrun: %v\n", err)
	}
	stop()
	os.Exit(launch.ExitCode(err))
}
