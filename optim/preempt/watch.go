package preempt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	ipreempt "github.com/gohorovod/gohorovod/internal/preempt"
	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/tensor"
)

// ExitStatus is the exit status of a worker that was preempted: it
// stopped at a step boundary, with every other rank, after its
// checkpoint. gohorovodrun exits with it too. It is distinct from a
// failure's 1, from the 75 of a rank that ended itself because another
// froze, and from the 128+N of a process killed by signal N.
const ExitStatus = ipreempt.ExitStatus

// DefaultGrace is Options.Grace's default.
const DefaultGrace = ipreempt.DefaultGrace

// ErrPreempted is what Check returns once every rank has stopped and
// checkpointed because it was told to.
var ErrPreempted = errors.New("preempt: told to stop; every rank stopped at the same step boundary after its checkpoint")

// ExitCode is the exit status for a training function's result: 0 for
// nil, ExitStatus for ErrPreempted, 1 for any other error.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrPreempted):
		return ExitStatus
	}
	return 1
}

// Options configure a Watcher.
type Options struct {
	// Grace is how long the ranks have, from the first signal, to agree,
	// checkpoint and return from Check; then the process ends at once.
	// 0: DefaultGrace. Keep it under what the scheduler allows (SLURM's
	// --signal lead time, Kubernetes' terminationGracePeriodSeconds).
	Grace time.Duration
	// Signals are the signals that ask for a stop; nil: SIGTERM, SIGUSR1
	// and SIGINT; empty but not nil: none (only calls of Signal).
	Signals []os.Signal
	// Name is the name of Check's collectives; "": "gohorovod.preempt".
	Name string
	// Log receives a line for each signal; nil: os.Stderr.
	Log io.Writer
	// Exit ends the process at once; nil: os.Exit. Tests replace it.
	Exit func(code int)
}

// Watcher turns the stop signals into an agreed stop at a step boundary.
type Watcher struct {
	coll optim.Collectives
	o    Options
	sigs chan os.Signal
	done chan struct{}
	wg   sync.WaitGroup
	// listening is the file that tells gohorovodrun this process
	// listens (announce), removed by Close; "" when there is none.
	listening string

	mu    sync.Mutex
	m     ipreempt.Worker
	timer *time.Timer
	first syscall.Signal
}

// Watch starts catching the stop signals for a training loop over coll.
// Close stops it.
func Watch(coll optim.Collectives, o Options) (*Watcher, error) {
	if coll == nil {
		return nil, errors.New("preempt: Watch needs the collectives of the job")
	}
	if o.Grace < 0 {
		return nil, fmt.Errorf("preempt: a negative grace period %v", o.Grace)
	}
	if o.Signals == nil {
		o.Signals = []os.Signal{syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGINT}
	}
	if o.Name == "" {
		o.Name = "gohorovod.preempt"
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.Exit == nil {
		o.Exit = os.Exit
	}
	w := &Watcher{coll: coll, o: o, sigs: make(chan os.Signal, 4), done: make(chan struct{})}
	w.m.Grace = o.Grace
	if len(o.Signals) > 0 { // Notify with none would relay every signal
		signal.Notify(w.sigs, o.Signals...)
		w.listening = announce(os.Getenv(ipreempt.EnvListeners))
	}
	w.wg.Add(1)
	go w.watch()
	return w, nil
}

// watch receives the signals until Close.
func (w *Watcher) watch() {
	defer w.wg.Done()
	for {
		select {
		case <-w.done:
			return
		case s := <-w.sigs:
			w.Signal(s)
		}
	}
}

// Signal acts as if s had been received: the first asks for a stop at the
// next step boundary and starts the grace period, the second ends the
// process at once. The signal handler calls it; a program may call it
// for a stop it learnt of otherwise (a scheduler's API).
func (w *Watcher) Signal(s os.Signal) {
	num, _ := s.(syscall.Signal)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m.Signal(time.Now()) == ipreempt.Exit {
		fmt.Fprintf(w.o.Log, "preempt: %v again: ending now, with status %d\n", s, 128+int(num))
		w.o.Exit(128 + int(num))
		return
	}
	w.first = num
	deadline, _ := w.m.Deadline()
	fmt.Fprintf(w.o.Log, "preempt: %v: stopping at the next step boundary, with a checkpoint, within %v\n",
		s, time.Until(deadline).Round(time.Second))
	w.timer = time.AfterFunc(time.Until(deadline), w.graceOver)
}

// graceOver ends the process when the grace period has run out.
func (w *Watcher) graceOver() {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.done:
		return
	default:
	}
	if w.m.Tick(time.Now()) == ipreempt.Exit {
		fmt.Fprintf(w.o.Log, "preempt: the grace period of %v ran out before the stop was done: ending now, with status %d\n",
			w.grace(), 128+int(w.first))
		w.o.Exit(128 + int(w.first))
	}
}

func (w *Watcher) grace() time.Duration {
	if w.o.Grace > 0 {
		return w.o.Grace
	}
	return DefaultGrace
}

// Requested reports whether this rank was told to stop.
func (w *Watcher) Requested() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m.Requested()
}

// Check is called by every rank at every step boundary. It agrees with
// the other ranks whether any was told to stop; if not, it returns nil.
// If so, it calls save (the checkpoint: it may itself be collective),
// waits until every rank's save has returned, and returns ErrPreempted,
// or, when save failed on some rank, an error that says so (the stop
// still happened: the caller must not train on).
func (w *Watcher) Check(save func() error) error {
	w.mu.Lock()
	mine := w.m.Requested()
	w.mu.Unlock()
	n, err := w.sum(mine, w.o.Name+".stop")
	if err != nil {
		return fmt.Errorf("preempt: agreeing whether to stop: %w", err)
	}
	w.mu.Lock()
	d := w.m.Boundary(n > 0)
	w.mu.Unlock()
	if d != ipreempt.Stop {
		return nil
	}
	var saveErr error
	if save != nil {
		saveErr = save()
	}
	failed, err := w.sum(saveErr != nil, w.o.Name+".saved")
	switch {
	case err != nil:
		return fmt.Errorf("preempt: stopped (told to), but the ranks could not agree that their checkpoints are done: %w", err)
	case saveErr != nil:
		return fmt.Errorf("preempt: stopped (told to), but the checkpoint failed here: %w", saveErr)
	case failed > 0:
		return fmt.Errorf("preempt: stopped (told to), but the checkpoint failed on %d rank(s)", failed)
	}
	return ErrPreempted
}

// sum allreduces a flag: the number of ranks where it is true.
func (w *Watcher) sum(flag bool, name string) (int, error) {
	t := tensor.New(tensor.Float64, 1)
	if flag {
		t.Float64s()[0] = 1
	}
	h, err := w.coll.AllreduceAsync(t, name, tensor.Sum, 1, 1)
	if err != nil {
		return 0, err
	}
	if err := h.Wait(context.Background()); err != nil {
		return 0, err
	}
	return int(t.Float64s()[0] + 0.5), nil
}

// Close stops catching the signals (their default actions return) and
// cancels the grace period's timer.
func (w *Watcher) Close() error {
	signal.Stop(w.sigs)
	if w.listening != "" {
		os.Remove(w.listening)
	}
	w.mu.Lock()
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
	w.wg.Wait()
	return nil
}

// announce tells gohorovodrun that this process stops at step boundaries
// when told to: a file named by its pid in dir (the launcher's
// GOHOROVOD_PREEMPT_DIR), whose path it returns. With no dir, or one that
// is not here (a worker on another host than its launcher), it returns "":
// the launcher then sees no listener on its own host.
func announce(dir string) string {
	if dir == "" {
		return ""
	}
	p := filepath.Join(dir, strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return ""
	}
	return p
}
