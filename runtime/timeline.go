package runtime

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/negotiate"
	"github.com/gohorovod/gohorovod/runtime/internal/timeline"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
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

// observer is what a loop shows of its work on the timeline: rank 0's
// writer while one is open (w, shared by the process sets' loops), fed from
// a few places only: the cycle marks, negotiation's events, and each
// performed response with the activities its performer recorded.
type observer struct {
	w   *timeline.Timeline
	log *zerolog.Logger
}

// on reports whether a timeline is being written.
func (o *observer) on() bool { return o.w != nil }

// open opens the timeline HOROVOD_TIMELINE names, on rank 0.
func (o *observer) open(cfg config.Config, rank int) error {
	if rank != 0 || cfg.Timeline == "" || cfg.Timeline == config.TimelineDynamic {
		return nil
	}
	w, err := timeline.Open(cfg.Timeline, time.Now(), cfg.TimelineMarkCycles)
	if err != nil {
		return err
	}
	o.w = w
	return nil
}

// apply performs a pending StartTimeline or StopTimeline request (c's), at
// the start of a cycle (now), where no span of an operation is open.
func (o *observer) apply(c *timelineControl, now time.Time) {
	req := c.pending.Load()
	if req == nil || !c.pending.CompareAndSwap(req, nil) {
		return
	}
	if req.path == "" && o.w == nil {
		o.log.Info().Msg("Timeline is already stopped. Please start timeline before stopping it.")
		req.done <- nil
		return
	}
	var errs []error
	if err := o.close(now); err != nil {
		errs = append(errs, fmt.Errorf("completing the current timeline: %w", err))
	}
	if req.path != "" {
		w, err := timeline.Open(req.path, now, req.mark)
		if err != nil {
			errs = append(errs, err)
		} else {
			o.w = w
		}
	}
	req.done <- errors.Join(errs...)
}

// close completes and closes the timeline, if one is open: its open spans
// end at now.
func (o *observer) close(now time.Time) error {
	if o.w == nil {
		return nil
	}
	w := o.w
	o.w = nil
	if n := w.Repairs(); n > 0 {
		// The writer kept the file well-formed, but the loop reported
		// times out of order or an end without a start: a bug here.
		o.log.Error().Int("events", n).Msg("timeline: events out of order were repaired")
	}
	err := w.Close(now)
	if err != nil {
		o.log.Error().Err(err).Msg("closing the timeline")
	}
	return err
}

// mark marks the start of a cycle, when the timeline marks cycles.
func (o *observer) mark(now time.Time) {
	if o.w != nil {
		o.w.MarkCycle(now)
	}
}

// negotiation draws rank 0's coordinator's events of one negotiation step.
func (o *observer) negotiation(events []negotiate.Event, now time.Time) {
	if o.w == nil {
		return
	}
	for _, ev := range events {
		switch ev.Kind {
		case negotiate.Started:
			o.w.NegotiateStart(ev.Name, ev.Type.String(), now)
		case negotiate.RankReady:
			o.w.NegotiateRankReady(ev.Name, int(ev.Rank), now)
		case negotiate.Finished:
			o.w.NegotiateEnd(ev.Name, now)
		}
	}
}

// response draws a performed response's entries: a span each from start
// to end (a cached entry's wait since it was enqueued is drawn before it,
// see timeline.Timeline.Start), and in it the activities acts.
func (o *observer) response(ents []*entry, op string, start, end time.Time, acts []activity) {
	if o.w == nil {
		return
	}
	for _, e := range ents {
		o.w.Start(e.req.Name, op, e.enqueued, start)
	}
	for _, a := range acts {
		for _, e := range ents {
			o.w.ActivityStart(e.req.Name, a.name, a.start)
			o.w.ActivityEnd(e.req.Name, a.end)
		}
	}
	for _, e := range ents {
		o.w.End(e.req.Name, e.req.DType.String(), wire.FormatShape(e.req.Shape), end)
	}
}

// flush writes what the timeline holds to its file.
func (o *observer) flush() {
	if o.w != nil {
		if err := o.w.Flush(); err != nil {
			o.log.Error().Err(err).Msg("timeline")
		}
	}
}
