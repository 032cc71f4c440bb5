package transport

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/internal/procid"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// The launcher watch: a worker started by gohorovodrun exits when the
// launcher is gone, so that no worker outlives a launcher that was killed
// with SIGKILL (and so could not stop its job). The launcher names itself
// in GOHOROVOD_LAUNCHER (config.Config.Launcher). Only a worker on the
// launcher's host, in its pid namespace, can see it; workers on other
// hosts rely on the MPI launcher's ssh connections closing, which makes
// Open MPI's daemons stop their ranks.

// launcherPoll is how often the watch looks at the launcher.
const launcherPoll = 200 * time.Millisecond

// launcherGoneStatus is the exit status of a worker whose launcher is gone.
const launcherGoneStatus = 1

type launcherVerdict uint8

const (
	launcherUnseen launcherVerdict = iota // none named, or not visible from here
	launcherAlive
	launcherGone
)

// judgeLauncher decides, from the launcher's identity, where this worker
// runs, and what reading the launcher's /proc/PID/stat gave, whether the
// launcher is still there. A read that fails for another reason than a
// missing process counts as alive: the watch must never end a healthy job.
func judgeLauncher(l procid.ID, here procid.Here, st procid.Stat, readErr error) launcherVerdict {
	switch {
	case l.IsZero() || !here.Sees(l):
		return launcherUnseen
	case errors.Is(readErr, fs.ErrNotExist):
		return launcherGone
	case readErr != nil:
		return launcherAlive
	case st.Exited() || st.Start != l.Start: // a zombie, or another process on a reused pid
		return launcherGone
	}
	return launcherAlive
}

// WatchLauncher starts the watch of the launcher that cfg names, if
// this worker can see it. The watch goroutine ends when stop is closed
// (the runtime's loop has exited); when the launcher is gone it writes
// why to standard error and exits the process.
func WatchLauncher(cfg config.Config, rank int, stop <-chan struct{}, log zerolog.Logger) {
	id, err := procid.Parse(cfg.Launcher)
	if err != nil {
		log.Warn().Err(err).Msg(config.EnvLauncher + " is malformed: the launcher is not watched")
		return
	}
	if id.IsZero() {
		return
	}
	here, err := procid.Where()
	if judgeLauncher(id, here, procid.Stat{}, errors.New("not read")) == launcherUnseen {
		log.Debug().AnErr("error", err).Int("launcher_pid", id.PID).
			Msg("the launcher runs on another host or in another pid namespace: not watched")
		return
	}
	go watchLauncher(id, here, launcherPoll, stop, procid.ReadStat, func() {
		fmt.Fprintf(os.Stderr, "hvd: rank %d: the launcher (gohorovodrun, pid %d) is gone: exiting with status %d\n",
			rank, id.PID, launcherGoneStatus)
		os.Exit(launcherGoneStatus)
	})
}

// watchLauncher reads the launcher's stat with read every period until
// stop is closed, and calls gone (once, then returns) when judgeLauncher
// says the launcher is gone.
func watchLauncher(id procid.ID, here procid.Here, period time.Duration, stop <-chan struct{},
	read func(pid int) (procid.Stat, error), gone func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		st, err := read(id.PID)
		if judgeLauncher(id, here, st, err) == launcherGone {
			gone()
			return
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}
