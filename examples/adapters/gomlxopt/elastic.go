package gomlxopt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"

	"github.com/gohorovod/gohorovod/optim/elastic"
)

// ElasticHandler returns the elastic Handler of every variable in the
// trainer's context: the model's, the optimizer's state and the global
// step. It is an elastic.Codec too, so that a checkpoint.Checkpointer
// over a State that holds it writes the variables to disk and loads them
// back (with the State's sampler and counters beside them). Call Prepare first (the variables must exist), and no collective
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

// codecHead is the gob head of an encoded handler: each variable's scoped
// name and the length of its value in bytes; the values follow it raw, in
// its order.
type codecHead struct {
	Names []string
	Sizes []int
}

// Encode returns every variable's value (elastic.Codec): the length of a
// gob head (uint32, little-endian), the head, then the values' bytes.
func (h *handler) Encode() ([]byte, error) {
	vars := h.t.variables()
	var head codecHead
	vals := make([][]byte, len(vars))
	total := 0
	for i, v := range vars {
		b, err := hostCopy(v)
		if err != nil {
			return nil, err
		}
		vals[i] = b.Bytes()
		head.Names = append(head.Names, v.ScopeAndName())
		head.Sizes = append(head.Sizes, len(vals[i]))
		total += len(vals[i])
	}
	var hb bytes.Buffer
	if err := gob.NewEncoder(&hb).Encode(&head); err != nil {
		return nil, fmt.Errorf("gomlxopt: encoding the variables: %w", err)
	}
	out := make([]byte, 0, 4+hb.Len()+total)
	out = binary.LittleEndian.AppendUint32(out, uint32(hb.Len()))
	out = append(out, hb.Bytes()...)
	for _, b := range vals {
		out = append(out, b...)
	}
	return out, nil
}

// Decode sets every variable from b, as Encode returned it (elastic.Codec).
// The variables must be the context's, by name, order and size; otherwise
// the error names the first that differs, and no variable is changed.
func (h *handler) Decode(b []byte) error {
	if len(b) < 4 || int64(binary.LittleEndian.Uint32(b)) > int64(len(b)-4) {
		return fmt.Errorf("gomlxopt: %d bytes, too short for the variables' head", len(b))
	}
	n := 4 + int(binary.LittleEndian.Uint32(b))
	var head codecHead
	if err := gob.NewDecoder(bytes.NewReader(b[4:n])).Decode(&head); err != nil {
		return fmt.Errorf("gomlxopt: decoding the variables: %w", err)
	}
	vars := h.t.variables()
	if len(head.Names) != len(vars) || len(head.Sizes) != len(vars) {
		return fmt.Errorf("gomlxopt: the state has %d variables, this context %d", len(head.Names), len(vars))
	}
	raw := b[n:]
	vals := make([][]byte, len(vars))
	for i, v := range vars {
		cur, err := hostCopy(v)
		if err != nil {
			return err
		}
		switch {
		case head.Names[i] != v.ScopeAndName():
			return fmt.Errorf("gomlxopt: variable %d is %s in the state, %s in this context", i, head.Names[i], v.ScopeAndName())
		case head.Sizes[i] != cur.NumBytes():
			return fmt.Errorf("gomlxopt: variable %s has %d bytes in the state, %d in this context (shape %s)", v.ScopeAndName(), head.Sizes[i], cur.NumBytes(), v.Shape())
		case head.Sizes[i] > len(raw):
			return fmt.Errorf("gomlxopt: variable %s: %d bytes of its value are missing", v.ScopeAndName(), head.Sizes[i]-len(raw))
		}
		vals[i], raw = raw[:head.Sizes[i]], raw[head.Sizes[i]:]
	}
	if len(raw) != 0 {
		return fmt.Errorf("gomlxopt: %d bytes after the last variable", len(raw))
	}
	for i, v := range vars {
		if err := setFromBytes(v, vals[i]); err != nil {
			return err
		}
	}
	return nil
}
