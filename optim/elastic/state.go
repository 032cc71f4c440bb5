package elastic

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Broadcaster sends bytes from one rank to every rank. BroadcastBytes is
// called on every rank with the same root, in the same order; it returns
// root's b on every rank (root may get b itself back). b is ignored on the
// other ranks. FromRuntime gives the Broadcaster of a runtime.
type Broadcaster interface {
	BroadcastBytes(ctx context.Context, b []byte, root int) ([]byte, error)
}

// Handler keeps one part of the training state: it snapshots the live
// values, puts the snapshot back, and copies rank 0's live values to every
// rank. A Handler is used by one goroutine at a time.
type Handler interface {
	// Save snapshots the live values in memory.
	Save() error
	// Restore sets the live values back to the last snapshot.
	Restore() error
	// Sync replaces the live values of every rank by rank 0's, through b,
	// and snapshots them, so that a Restore before the next Save returns
	// to the synced values on every rank.
	Sync(ctx context.Context, b Broadcaster) error
}

// ErrNoBroadcaster is returned by Sync when the State has no Broadcaster.
var ErrNoBroadcaster = errors.New("elastic: the state has no broadcaster")

// State is the training state of an elastic job: the handlers it commits,
// restores and syncs together, and the callbacks that run after the group
// is re-formed. Build one with NewState. A State is used by the training
// goroutine (and, later, elastic.Run between its calls), one at a time.
type State struct {
	mu        sync.Mutex
	names     []string
	handlers  []Handler
	callbacks []func() error
	bcast     Broadcaster
	check     func() error
	onCommit  []func() error
}

// NewState returns a State over the named handlers and snapshots them all,
// so that a Restore before the first Commit returns to the initial values.
// Names label the handlers in errors and must be unique, as in
// NewState(b, Named("model", h1), Named("sampler", h2)). Commit, Restore and
// Sync visit the handlers in this order. b may be nil and set later with
// SetBroadcaster.
func NewState(b Broadcaster, handlers ...NamedHandler) (*State, error) {
	s := &State{bcast: b}
	seen := make(map[string]bool, len(handlers))
	for _, nh := range handlers {
		if nh.Handler == nil {
			return nil, fmt.Errorf("elastic: handler %q is nil", nh.Name)
		}
		if seen[nh.Name] {
			return nil, fmt.Errorf("elastic: duplicate handler name %q", nh.Name)
		}
		seen[nh.Name] = true
		s.names = append(s.names, nh.Name)
		s.handlers = append(s.handlers, nh.Handler)
	}
	if err := s.save(); err != nil {
		return nil, err
	}
	return s, nil
}

// NamedHandler is a Handler with the name that labels it in errors.
type NamedHandler struct {
	Name    string
	Handler Handler
}

// Named pairs a name with a handler for NewState.
func Named(name string, h Handler) NamedHandler { return NamedHandler{Name: name, Handler: h} }

// SetBroadcaster sets the Broadcaster that Sync uses; after the group is
// re-formed it is the new group's.
func (s *State) SetBroadcaster(b Broadcaster) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bcast = b
}

// SetCommitCheck sets a function that Commit calls after a successful
// snapshot; its error, if any, is Commit's. This is the hook for Horovod's
// check_host_updates: Run sets it, for the duration of the training
// function, to agree with every rank on whether hosts were added or removed
// and, if so, return an error that makes it re-form the group without
// restoring. nil (the default) checks nothing.
func (s *State) SetCommitCheck(check func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.check = check
}

// OnCommit adds fn to the functions that Commit calls, in the order they
// were added, after a successful snapshot and before the commit check; the
// first error is Commit's. Every rank commits at the same steps, so fn may
// be collective: a checkpoint.Checkpointer's PersistCommits uses it to
// write every k-th commit to disk.
func (s *State) OnCommit(fn func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onCommit = append(s.onCommit, fn)
}

// Commit snapshots every handler in memory, in the order given to
// NewState, then calls the OnCommit functions and runs the commit check
// (SetCommitCheck). A failed snapshot leaves the handlers before it with
// the new snapshot and the others with the old one: treat it as fatal.
func (s *State) Commit() error {
	if err := s.save(); err != nil {
		return err
	}
	s.mu.Lock()
	check, hooks := s.check, append([]func() error(nil), s.onCommit...)
	s.mu.Unlock()
	for _, fn := range hooks {
		if err := fn(); err != nil {
			return err
		}
	}
	if check != nil {
		return check()
	}
	return nil
}

func (s *State) save() error {
	for i, h := range s.handlers {
		if err := h.Save(); err != nil {
			return fmt.Errorf("elastic: commit of %q: %w", s.names[i], err)
		}
	}
	return nil
}

// Restore sets every handler back to the last commit (or to the values at
// NewState, or at the last Sync, whichever came last).
func (s *State) Restore() error {
	for i, h := range s.handlers {
		if err := h.Restore(); err != nil {
			return fmt.Errorf("elastic: restore of %q: %w", s.names[i], err)
		}
	}
	return nil
}

// Sync copies rank 0's live values of every handler to every rank and
// snapshots them. Every rank of the group calls it, with the handlers in the
// same order.
func (s *State) Sync(ctx context.Context) error {
	s.mu.Lock()
	b := s.bcast
	s.mu.Unlock()
	if b == nil {
		return ErrNoBroadcaster
	}
	for i, h := range s.handlers {
		if err := h.Sync(ctx, b); err != nil {
			return fmt.Errorf("elastic: sync of %q: %w", s.names[i], err)
		}
	}
	return nil
}

// RegisterResetCallback adds fn to the callbacks that Reset runs, after
// those registered before it; for example one that scales the learning rate
// by the new size, or calls a Sampler's SetPlacement with the new rank and
// size.
func (s *State) RegisterResetCallback(fn func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.callbacks = append(s.callbacks, fn)
}

// Reset runs the reset callbacks in the order they were registered and
// stops at the first that fails, returning its error (wrapped, with the
// callback's position). elastic.Run will call it after re-forming the
// group, before Sync.
func (s *State) Reset() error {
	s.mu.Lock()
	cbs := append([]func() error(nil), s.callbacks...)
	s.mu.Unlock()
	for i, fn := range cbs {
		if err := fn(); err != nil {
			return fmt.Errorf("elastic: reset callback %d: %w", i, err)
		}
	}
	return nil
}
