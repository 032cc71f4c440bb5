package runtime

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/liveness"
	"github.com/gohorovod/gohorovod/runtime/internal/transport"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// frozenStatus is the exit status of a rank that ends itself because
// another rank froze (under MPI, where a blocked collective cannot be
// cancelled, or on the embedded transport when the job has not ended by
// itself within frozenGrace).
const frozenStatus = 75

// frozenGrace is how long a rank on the embedded transport waits, after
// failing its collectives with the frozen rank's RankError, for the program
// to end on its own before it ends the process itself.
const frozenGrace = 10 * time.Second

// startLiveness starts this rank's member of the heartbeat star (see
// package liveness) on the jobs where a rank can freeze apart from the
// others: MPI and embedded jobs of more than one process. Rank 0 decides
// (its HOROVOD_HEARTBEAT_TIMEOUT_SECONDS is the job's), makes a fresh key
// and broadcasts both with its addresses over com; every rank calls it at
// Init, with com still idle. It returns nil where the check is off.
func (r *Runtime) startLiveness(com comm.Communicator, cfg config.Config, pl transport.Place, log zerolog.Logger) (*liveness.Star, error) {
	if (pl.Name != transport.MPI && pl.Name != transport.Embedded) || com.Size() < 2 {
		return nil, nil
	}
	rank := com.Rank()
	host, _ := os.Hostname()
	if cfg.Hostname != "" {
		host = cfg.Hostname
	}
	var info wire.Liveness
	var ln net.Listener
	if rank == 0 && cfg.HeartbeatTimeout > 0 {
		l, addrs, err := liveness.Listen()
		if err != nil {
			log.Warn().Err(err).Msg("frozen ranks will not be detected")
		} else {
			key := make([]byte, 32)
			rand.Read(key)
			ln, info = l, wire.Liveness{Timeout: cfg.HeartbeatTimeout, Key: key, Addrs: addrs, Host: host}
		}
	}
	b, err := bcastBytes(com, wire.AppendLiveness(nil, info))
	if err == nil {
		info, err = wire.DecodeLiveness(b)
	}
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("heartbeat channel: %w", err)
	}
	if info.Timeout <= 0 {
		return nil, nil
	}
	timeout := info.Timeout
	return liveness.Start(liveness.Config{
		Rank: rank, Size: com.Size(), Host: host, RootHost: info.Host, Key: info.Key, Timeout: timeout,
		OnFrozen: func(f liveness.Frozen) { r.frozen(f, timeout, com, pl, cfg.Elastic, log) },
		Logf:     func(format string, args ...any) { log.Warn().Msgf(format, args...) },
	}, ln, info.Addrs)
}

// bcastBytes broadcasts rank 0's b (its length first) and returns it on
// every rank.
func bcastBytes(com comm.Communicator, b []byte) ([]byte, error) {
	n := tensor.New(tensor.Int64, 1)
	if com.Rank() == 0 {
		n.Int64s()[0] = int64(len(b))
	}
	if err := com.Bcast(n, 0); err != nil {
		return nil, err
	}
	size := n.Int64s()[0]
	if size < 0 || size > 1<<20 {
		return nil, fmt.Errorf("broadcast of %d bytes", size)
	}
	t := tensor.New(tensor.Uint8, int(size))
	if com.Rank() == 0 {
		copy(t.Bytes(), b)
	}
	if err := com.Bcast(t, 0); err != nil {
		return nil, err
	}
	return t.Bytes(), nil
}

// frozen is the heartbeat star's handler: it names the frozen rank on
// this rank's log and standard error, then ends the job. Under MPI a
// collective blocked on the frozen rank cannot be cancelled, so the process
// exits (with frozenStatus; mpirun then ends the others). On the embedded
// transport the group is aborted with the frozen rank's RankError, so that
// every blocked and later call fails with it; an elastic job then re-forms
// without the rank, and a fixed one that has not ended by itself within
// frozenGrace is ended.
func (r *Runtime) frozen(f liveness.Frozen, timeout time.Duration, com comm.Communicator, pl transport.Place, elastic bool, log zerolog.Logger) {
	e := &RankError{Rank: f.Rank, Host: f.Host, Frozen: true, Unreachable: f.Unreachable,
		Message: fmt.Sprintf("it sent no heartbeat for %.1f s (%s=%g): stopped, swapped out or wedged",
			f.Silent.Seconds(), config.EnvHeartbeatTimeout, timeout.Seconds())}
	if f.Unreachable {
		e.Message = fmt.Sprintf("nothing came from it for %.1f s, not even TCP acknowledgements of the heartbeats (%s=%g): "+
			"the node is down or its network is cut", f.Silent.Seconds(), config.EnvHeartbeatTimeout, timeout.Seconds())
	}
	log.Error().Int("frozen_rank", f.Rank).Str("frozen_host", f.Host).Dur("silent", f.Silent).Msg(e.Error())
	if pl.MPI() {
		fmt.Fprintf(os.Stderr, "%v: rank %d is ending the job (exit status %d)\n", e, com.Rank(), frozenStatus)
		os.Exit(frozenStatus)
	}
	fmt.Fprintf(os.Stderr, "%v: rank %d is failing the job's collectives\n", e, com.Rank())
	if a, ok := com.(comm.Aborter); ok {
		if err := a.Abort(e); err != nil && !errors.Is(err, comm.ErrClosed) {
			log.Warn().Err(err).Msg("aborting the group")
		}
	}
	if elastic {
		// The launcher stops the frozen worker (it never exits by itself),
		// and the survivors re-form without it.
		if err := pl.ReportFrozen(f.Rank); err != nil {
			log.Warn().Err(err).Msg("reporting the frozen rank to the launcher")
		}
		return
	}
	time.AfterFunc(frozenGrace, func() {
		fmt.Fprintf(os.Stderr, "%v: rank %d is ending the job (exit status %d)\n", e, com.Rank(), frozenStatus)
		os.Exit(frozenStatus)
	})
}
