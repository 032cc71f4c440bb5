package elastic

import (
	"context"
	"errors"
	"fmt"

	"github.com/gohorovod/gohorovod/internal/elastichook"
	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// ErrRemoved is returned by Run in a worker that the re-formed job has no
// place for: its host was removed or blacklisted, or the job reached
// --max-np. Its training is over; the process should exit with status 0
// (the launcher no longer counts it).
var ErrRemoved = hvd.ErrRemoved

// ErrCollectiveBeforeRun is returned by Run when a collective ran on the
// runtime between Init and Run. In an elastic job a worker that joins
// later starts in Run: it would never call that collective, and the
// others would wait for it forever (Horovod documents the same rule).
// Make every collective part of the training function, or of the State
// (Sync broadcasts rank 0's values).
var ErrCollectiveBeforeRun = errors.New("elastic: a collective ran between Init and Run: in an elastic job no collective may run before Run, " +
	"because a worker that joins later would never call it; move it into the training function (or let State.Sync broadcast the values)")

// ErrNotElastic is wrapped by Run's error when the worker was not started
// by an elastic launcher: over MPI, which cannot re-form a running job,
// or by a launcher without elastic flags.
var ErrNotElastic = errors.New("elastic: this worker was not started by an elastic launcher")

// HostsUpdatedError is the error of State.Commit (inside Run) when the
// launcher announced that hosts were added or removed: every rank returns
// it at the same commit, and Run re-forms the group without restoring
// (Horovod's HostsUpdatedInterrupt). A training function returns it as it
// is.
type HostsUpdatedError struct {
	Update hvd.HostUpdate
}

// Error implements the error interface.
func (e *HostsUpdatedError) Error() string {
	what := ""
	switch {
	case e.Update.Added && e.Update.Removed:
		what = "added and removed"
	case e.Update.Added:
		what = "added"
	case e.Update.Removed:
		what = "removed"
	}
	return fmt.Sprintf("elastic: hosts were %s (update %d): the group re-forms at this commit", what, e.Update.Seq)
}

// IsWorkerFailure reports whether err says that the group failed under
// the caller: a collective failed because a rank died, or its transport
// did, or another rank stopped the job (Horovod's HorovodInternalError).
// Run restores the last commit and re-forms the group on such errors; it
// returns any other error of the training function.
func IsWorkerFailure(err error) bool {
	var pe *comm.PeerError
	return errors.Is(err, hvd.ErrShutdown) || errors.As(err, &pe)
}

// RunOption configures Run.
type RunOption func(*runConfig)

type runConfig struct {
	rt   *hvd.Runtime
	logf func(format string, args ...any)
}

// WithRuntime makes Run use r instead of hvd.Default().
func WithRuntime(r *hvd.Runtime) RunOption { return func(c *runConfig) { c.rt = r } }

// WithLogf makes Run report each reset (why, and the new rank and size)
// through logf.
func WithLogf(logf func(format string, args ...any)) RunOption {
	return func(c *runConfig) { c.logf = logf }
}

// reformer is a Handler that follows the group when it is re-formed: Run
// calls reform after every Restart, before the reset callbacks.
type reformer interface {
	reform(r *hvd.Runtime) error
}

// reform re-deals the rest of the epoch over the new rank and size.
func (h *SamplerHandler) reform(r *hvd.Runtime) error { return h.s.SetPlacement(r.Rank(), r.Size()) }

// reform moves a DistributedOptimizer onto the re-formed runtime.
func (o *Optimizer) reform(r *hvd.Runtime) error {
	d, ok := o.opt.(*optim.DistributedOptimizer)
	if !ok {
		return nil
	}
	coll, err := optim.FromRuntime(r)
	if err != nil {
		return err
	}
	return d.Rebind(coll)
}

// Run is the elastic training loop (Horovod's hvd.elastic.run). It syncs
// state from rank 0 and calls train; when train returns nil, so does Run.
//
// When train fails because the group failed (IsWorkerFailure: a worker
// died, and the survivors' collectives failed), Run restores the last
// commit, re-forms the group (the runtime's Restart: a new rendezvous
// round, with a new rank and size), moves the state's handlers onto it
// (a Sampler is re-dealt over the new size, a DistributedOptimizer is
// rebound to the new runtime), runs the reset callbacks, syncs the state
// from the new rank 0 (always an old worker) and calls train again. When
// the launcher announces that hosts changed, every rank's next Commit
// returns a *HostsUpdatedError and Run does the same without restoring.
// Any other error of train, or of those steps, is Run's. A worker the
// new group has no place for gets ErrRemoved.
//
// Run syncs at every reset, also after hosts were only removed, where
// Horovod skips the sync: ranks that skip it while others wait in it is
// Horovod's deadlock #3494.
//
// The runtime must be initialised (hvd.Init) by an elastic launcher
// (gohorovodrun with --min-np, --max-np or --host-discovery-script, on the
// embedded transport): over MPI, or with a fixed launcher, Run returns an
// error wrapping ErrNotElastic, except in a process started alone (one
// rank, no launcher), where it calls train once. No collective may run
// between Init and Run (ErrCollectiveBeforeRun).
//
// The state's Commit checks for host updates with a small broadcast from
// rank 0, so every rank must commit at the same steps, as Horovod's
// training loops do.
func Run(ctx context.Context, state *State, train func(ctx context.Context) error, opts ...RunOption) error {
	cfg := runConfig{}
	for _, o := range opts {
		o(&cfg)
	}
	rt := cfg.rt
	if rt == nil {
		rt = hvd.Default()
	}
	if !rt.IsInitialized() {
		return fmt.Errorf("elastic: Run: %w", hvd.ErrNotInitialized)
	}
	elastic := rt.Config().Elastic
	switch {
	case rt.MPIEnabled():
		return fmt.Errorf("%w: it runs over MPI, which cannot re-form a running job; start it with gohorovodrun's elastic flags "+
			"(--min-np, --max-np or --host-discovery-script), which run the embedded transport", ErrNotElastic)
	case !elastic && rt.Size() > 1:
		return fmt.Errorf("%w: start it with gohorovodrun's elastic flags (--min-np, --max-np or --host-discovery-script)", ErrNotElastic)
	case elastic && rt.Stats().Requests > 0:
		return ErrCollectiveBeforeRun
	}
	state.SetBroadcaster(FromRuntime(rt))
	if elastic {
		state.SetCommitCheck(func() error { return checkHostUpdates(ctx, rt) })
		defer state.SetCommitCheck(nil)
	}
	for {
		err := state.Sync(ctx)
		if err == nil {
			if err = train(ctx); err == nil {
				return nil
			}
		}
		var hu *HostsUpdatedError
		switch {
		case !elastic:
			return err
		case errors.As(err, &hu):
		case IsWorkerFailure(err):
			if rerr := state.Restore(); rerr != nil {
				return errors.Join(err, rerr)
			}
		default:
			return err
		}
		why := err
		if err := elastichook.Restart(rt); err != nil {
			if errors.Is(err, hvd.ErrRemoved) {
				return ErrRemoved
			}
			return fmt.Errorf("elastic: re-forming the group after %v: %w", why, err)
		}
		if cfg.logf != nil {
			cfg.logf("elastic: re-formed the group (round %d): rank %d of %d, after: %v", rt.ElasticRound(), rt.Rank(), rt.Size(), why)
		}
		state.SetBroadcaster(FromRuntime(rt))
		if err := state.reform(rt); err != nil {
			return err
		}
		if err := state.Reset(); err != nil {
			return err
		}
	}
}

// reform moves every handler that follows the group onto the re-formed
// runtime.
func (s *State) reform(r *hvd.Runtime) error {
	for i, h := range s.handlers {
		if rf, ok := h.(reformer); ok {
			if err := rf.reform(r); err != nil {
				return fmt.Errorf("elastic: moving %q onto the re-formed group: %w", s.names[i], err)
			}
		}
	}
	return nil
}

// checkHostUpdates is the commit check of an elastic job (Horovod's
// check_host_updates): rank 0 takes the host updates the launcher sent it
// and broadcasts them, so that every rank agrees; any update is a
// *HostsUpdatedError on every rank.
func checkHostUpdates(ctx context.Context, rt *hvd.Runtime) error {
	msg := []int64{0, 0}
	if rt.Rank() == 0 {
		if u, ok := elastichook.TakeHostUpdate(rt); ok {
			msg[0] = int64(u.Seq)
			if u.Added {
				msg[1] |= 1
			}
			if u.Removed {
				msg[1] |= 2
			}
		}
	}
	t := tensor.FromInt64(msg)
	if err := rt.BroadcastInPlace(ctx, t, 0, "elastic.host_update"); err != nil {
		return fmt.Errorf("elastic: checking for host updates: %w", err)
	}
	got := t.Int64s()
	if got[1] == 0 {
		return nil
	}
	return &HostsUpdatedError{Update: hvd.HostUpdate{Seq: int(got[0]), Added: got[1]&1 != 0, Removed: got[1]&2 != 0}}
}
