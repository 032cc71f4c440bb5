package checkpoint

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gohorovod/gohorovod/optim/elastic"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

// ErrNoCheckpoint is wrapped by Load's error when the directory holds no
// checkpoint (or does not exist): training starts from the beginning.
var ErrNoCheckpoint = errors.New("checkpoint: no checkpoint")

// ErrClosed is returned by the calls on a closed Checkpointer.
var ErrClosed = errors.New("checkpoint: the checkpointer is closed")

// NoValidError is Load's error when the directory holds checkpoints but
// every one of them is damaged. Skipped says, for each, which file and
// why.
type NoValidError struct {
	Dir     string
	Skipped []string
}

// Error names the directory and each damaged checkpoint with its reason.
func (e *NoValidError) Error() string {
	return fmt.Sprintf("checkpoint: no valid checkpoint in %s: %s", e.Dir, strings.Join(e.Skipped, "; "))
}

// SaveError is the error, on every rank, of a write that failed on rank 0:
// the disk is full, the directory is read-only, ... The checkpoints written
// before are untouched, and no partial file is left under a checkpoint's
// name.
type SaveError struct {
	Step int64
	// Msg is rank 0's error text.
	Msg string
	// Err is rank 0's error, on rank 0 (nil on the other ranks).
	Err error
}

// Error names the step and gives rank 0's message.
func (e *SaveError) Error() string {
	return fmt.Sprintf("checkpoint: saving step %d failed on rank 0: %s", e.Step, e.Msg)
}

// Unwrap returns rank 0's error (nil on the other ranks).
func (e *SaveError) Unwrap() error { return e.Err }

// Info describes the checkpoint that Load read.
type Info struct {
	// Path is the checkpoint file, as rank 0 named it.
	Path string
	// Step is the step that Save was given.
	Step int64
	// Written is when its snapshot was taken.
	Written time.Time
	// Bytes is the file's size.
	Bytes int64
	// Skipped reports each newer checkpoint that was damaged and passed
	// over, naming the file and saying why.
	Skipped []string
}

// Option configures a Checkpointer.
type Option func(*config)

type config struct {
	b          elastic.Broadcaster
	rank       func() int
	keep       int
	background bool
	logf       func(format string, args ...any)
	now        func() time.Time
}

// Runtime makes the checkpointer's collectives run on r (the default is
// hvd.Default()). An elastic job's runtime keeps its identity when the
// group re-forms, so the checkpointer follows it.
func Runtime(r *hvd.Runtime) Option {
	return func(c *config) { c.b, c.rank = elastic.FromRuntime(r), r.Rank }
}

// Group makes the checkpointer's collectives go through b, on the rank
// that rank returns: for tests, and for groups that are not a runtime.
func Group(b elastic.Broadcaster, rank func() int) Option {
	return func(c *config) { c.b, c.rank = b, rank }
}

// Keep sets how many checkpoints stay in the directory: after each write
// the oldest beyond the k newest are removed (default 3; at least 1).
func Keep(k int) Option { return func(c *config) { c.keep = k } }

// Background sets whether Save writes in the background (the default): it
// returns once the state is snapshot in memory, and the next Save, Flush
// or Close waits for the write and reports its outcome. With false, Save
// returns once the checkpoint is on disk, with the outcome of its write.
func Background(on bool) Option { return func(c *config) { c.background = on } }

// Logf makes rank 0 report each checkpoint written and each damaged one
// passed over through logf.
func Logf(logf func(format string, args ...any)) Option { return func(c *config) { c.logf = logf } }

// Checkpointer writes the training state of an elastic.State to a
// directory and reads it back: the same handlers that elastic training
// commits and syncs (the model with its optimizer, the sampler, the
// epoch and step and any other objects, a random generator). Save and
// Load are collective: every rank calls them at the same steps, in the
// same order. Rank 0 reads and writes the files; the directory must be
// rank 0's to write. A Checkpointer is used by one goroutine at a time.
type Checkpointer struct {
	dir   string
	state *elastic.State
	cfg   config

	// Of the write in flight (rank 0) or whose outcome is not yet agreed
	// (every rank): unsettled is the same on every rank.
	unsettled   bool
	pendingStep int64
	done        chan error // rank 0's write's outcome
	wg          sync.WaitGroup
	closed      bool
}

// New returns the Checkpointer of state in dir (created by the first
// Save if need be). Every handler of state must be an elastic.Codec, as
// the package's own are. New registers a reset callback on state: when an
// elastic group re-forms, a Save not yet flushed is forgotten on every
// rank (workers that join know nothing of it), its write finished and, if
// it failed, logged.
func New(dir string, state *elastic.State, opts ...Option) (*Checkpointer, error) {
	if dir == "" {
		return nil, errors.New("checkpoint: no directory")
	}
	if state == nil {
		return nil, errors.New("checkpoint: nil state")
	}
	cfg := config{keep: 3, background: true, now: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.keep < 1 {
		return nil, fmt.Errorf("checkpoint: Keep(%d): at least one checkpoint must be kept", cfg.keep)
	}
	if cfg.b == nil {
		r := hvd.Default()
		cfg.b, cfg.rank = elastic.FromRuntime(r), r.Rank
	}
	if _, err := state.Encode(); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	c := &Checkpointer{dir: dir, state: state, cfg: cfg}
	state.RegisterResetCallback(c.settle)
	return c, nil
}

// Dir returns the checkpoint directory.
func (c *Checkpointer) Dir() string { return c.dir }

func (c *Checkpointer) logf(format string, args ...any) {
	if c.cfg.logf != nil && c.cfg.rank() == 0 {
		c.cfg.logf(format, args...)
	}
}
