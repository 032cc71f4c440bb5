package gomlxopt

import (
	"context"
	"errors"
	"fmt"

	"github.com/gohorovod/gohorovod/optim/elastic"
)

// ElasticHandler returns the elastic Handler of every variable in the
// trainer's context: the model's, the optimizer's state and the global
// step. Call Prepare first (the variables must exist), and no collective
// before elastic.Run: the State's Sync copies rank 0's variables, so the
// Trainer does not broadcast them itself. After the group is re-formed,
// give the Trainer the new collectives (SetCollectives) in a reset
// callback.
func (t *Trainer) ElasticHandler() (elastic.Handler, error) {
	if !t.prepared {
		return nil, errors.New("gomlxopt: ElasticHandler before Prepare")
	}
	t.synced = true
	h := &handler{t: t}
	if err := h.Save(); err != nil {
		return nil, err
	}
	return h, nil
}

type handler struct {
	t    *Trainer
	snap [][]byte
}

func (h *handler) Save() error {
	vars := h.t.variables()
	snap := make([][]byte, len(vars))
	for i, v := range vars {
		b, err := hostCopy(v)
		if err != nil {
			return err
		}
		snap[i] = b.Bytes()
	}
	h.snap = snap
	return nil
}

func (h *handler) Restore() error {
	vars := h.t.variables()
	if len(vars) != len(h.snap) {
		return fmt.Errorf("gomlxopt: %d variables, the snapshot holds %d", len(vars), len(h.snap))
	}
	for i, v := range vars {
		if err := setFromBytes(v, h.snap[i]); err != nil {
			return err
		}
	}
	return nil
}

func (h *handler) Sync(ctx context.Context, b elastic.Broadcaster) error {
	for _, v := range h.t.variables() {
		local, err := hostCopy(v)
		if err != nil {
			return err
		}
		got, err := b.BroadcastBytes(ctx, local.Bytes(), 0)
		if err != nil {
			return fmt.Errorf("gomlxopt: syncing %s: %w", v.ScopeAndName(), err)
		}
		if err := setFromBytes(v, got); err != nil {
			return err
		}
	}
	return h.Save()
}
