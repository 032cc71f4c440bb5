package runtime

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/timeline"
)

// timelineDisabledText is Horovod's text for start_timeline without
// HOROVOD_TIMELINE (horovod/common/basics.py).
const timelineDisabledText = "Set HOROVOD_TIMELINE=DYNAMIC to enable dynamic timeline usage."

// ErrTimelineDisabled is returned by StartTimeline when the runtime was
// initialised without a timeline (HOROVOD_TIMELINE unset, config.Config's
// Timeline empty): set it to a file, or to config.TimelineDynamic to start
// with none.
var ErrTimelineDisabled = errors.New("hvd: " + timelineDisabledText)

// timelineControl hands StartTimeline and StopTimeline requests to the
// background loop, which alone owns the timeline writer.
type timelineControl struct {
	mu      sync.Mutex // one request at a time
	pending atomic.Pointer[timelineReq]
}

// timelineReq asks the loop to close the current timeline, if any, and to
// open one at path unless path is empty.
type timelineReq struct {
	path string
	mark bool
	done chan error // buffered: the loop never waits on it
}

// StartTimeline starts recording the timeline (a Chrome trace, see
// HOROVOD_TIMELINE in runtime/config) into a new file at path, with
// CYCLE_START marks at each background cycle if markCycles: Horovod's
// hvd.start_timeline. A timeline already being written, the one
// HOROVOD_TIMELINE named or one an earlier StartTimeline started, is
// completed and closed first: the call switches files. The file's times
// count from the cycle that opened it.
//
// The background loop applies it at the start of its next cycle; the call
// returns once it has, with the error of creating the file, if any. Only
// rank 0 writes the timeline (it covers the negotiation of every rank): on
// the other ranks StartTimeline checks its arguments, does nothing and
// returns nil, so every rank may make the same calls.
//
// It returns ErrTimelineDisabled if the runtime was initialised without a
// timeline (set HOROVOD_TIMELINE=DYNAMIC to start without a file), an error
// wrapping ErrInvalidArgument for an empty path, and ErrNotInitialized or
// ErrShutdown if the runtime is not running.
func (r *Runtime) StartTimeline(path string, markCycles bool) error {
	rank, enabled, stopped, err := r.timelineTarget()
	if err != nil {
		return err
	}
	if path == "" {
		return invalid("StartTimeline: file path must not be empty")
	}
	if !enabled {
		return ErrTimelineDisabled
	}
	if rank != 0 {
		return nil
	}
	if err := r.timelineRequest(&timelineReq{path: path, mark: markCycles}, stopped); err != nil {
		return fmt.Errorf("hvd: StartTimeline: %w", err)
	}
	return nil
}

// StopTimeline completes and closes the timeline file being written, and
// records no more until StartTimeline: Horovod's hvd.stop_timeline. As in
// Horovod, stopping when no timeline is being written does nothing (an
// info-level log says so) and returns nil.
//
// Like StartTimeline it is applied by the background loop at its next
// cycle and returns once it has, with the error of completing the file, if
// any; on ranks other than 0 it does nothing and returns nil. It returns
// ErrNotInitialized or ErrShutdown if the runtime is not running (a
// timeline still open at Shutdown is completed then).
func (r *Runtime) StopTimeline() error {
	rank, _, stopped, err := r.timelineTarget()
	if err != nil {
		return err
	}
	if rank != 0 {
		return nil
	}
	if err := r.timelineRequest(&timelineReq{}, stopped); err != nil {
		return fmt.Errorf("hvd: StopTimeline: %w", err)
	}
	return nil
}

// timelineTarget returns what a timeline request needs of a running
// runtime: its rank, whether the timeline was enabled at Init, and the
// channel closed when its loop exits.
func (r *Runtime) timelineTarget() (rank int, enabled bool, stopped <-chan struct{}, err error) {
	if err := r.checkRunning(); err != nil {
		return 0, false, nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rank, r.cfg.Timeline != "", r.stopped, nil
}

// timelineRequest hands req to the loop and waits until the loop applied
// it, or exited without doing so.
func (r *Runtime) timelineRequest(req *timelineReq, stopped <-chan struct{}) error {
	c := &r.tlc
	c.mu.Lock()
	defer c.mu.Unlock()
	req.done = make(chan error, 1)
	c.pending.Store(req)
	r.q.signal() // do not wait for the next tick
	select {
	case err := <-req.done:
		return err
	case <-stopped:
		if !c.pending.CompareAndSwap(req, nil) {
			// The loop took the request before it exited.
			return <-req.done
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return &shutdownError{cause: r.stopErr}
	}
}

// openTimeline opens the timeline HOROVOD_TIMELINE names, on rank 0.
func (l *loop) openTimeline() error {
	if l.rank != 0 || l.cfg.Timeline == "" || l.cfg.Timeline == config.TimelineDynamic {
		return nil
	}
	tl, err := timeline.Open(l.cfg.Timeline, time.Now(), l.cfg.TimelineMarkCycles)
	if err != nil {
		return err
	}
	l.tl = tl
	return nil
}

// applyTimeline performs a pending StartTimeline or StopTimeline request,
// at the start of a cycle (now), where no span of an operation is open.
func (l *loop) applyTimeline(now time.Time) {
	c := &l.r.tlc
	req := c.pending.Load()
	if req == nil || !c.pending.CompareAndSwap(req, nil) {
		return
	}
	if req.path == "" && l.tl == nil {
		l.log.Info().Msg("Timeline is already stopped. Please start timeline before stopping it.")
		req.done <- nil
		return
	}
	var errs []error
	if err := l.closeTimeline(now); err != nil {
		errs = append(errs, fmt.Errorf("completing the current timeline: %w", err))
	}
	if req.path != "" {
		tl, err := timeline.Open(req.path, now, req.mark)
		if err != nil {
			errs = append(errs, err)
		} else {
			l.tl = tl
		}
	}
	req.done <- errors.Join(errs...)
}

// closeTimeline completes and closes the timeline, if one is open: its
// open spans end at now.
func (l *loop) closeTimeline(now time.Time) error {
	if l.tl == nil {
		return nil
	}
	tl := l.tl
	l.tl = nil
	if n := tl.Repairs(); n > 0 {
		// The writer kept the file well-formed, but the loop reported
		// times out of order or an end without a start: a bug here.
		l.log.Error().Int("events", n).Msg("timeline: events out of order were repaired")
	}
	err := tl.Close(now)
	if err != nil {
		l.log.Error().Err(err).Msg("closing the timeline")
	}
	return err
}
