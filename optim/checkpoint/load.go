package checkpoint

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gohorovod/gohorovod/optim/elastic"
)

// What rank 0 tells every rank at Load: its envelope's first byte.
const (
	loadFound   = 0
	loadNone    = 1
	loadInvalid = 2
	loadFailed  = 3
)

// loadHead is the part of Load's envelope that is not the file.
type loadHead struct {
	Path    string   `json:"path,omitempty"`
	Skipped []string `json:"skipped,omitempty"`
	Err     string   `json:"err,omitempty"`
}

// Load sets the state to the newest valid checkpoint of the directory and
// snapshots it (a Restore returns there). It is collective: rank 0 reads
// the checkpoints from the newest, verifies each whole (size, format,
// every part's checksum), passes over the damaged ones, reporting each by
// name in Info.Skipped (and through Logf) and renaming it with ".damaged"
// appended, and sends the first valid one to every rank, which decodes
// it. A checkpoint written at another number of ranks resumes at this
// one: the sampler re-deals the rest of its epoch over the ranks there are.
//
// Errors, the same on every rank: ErrNoCheckpoint (wrapped) when there is
// none, so training starts from the beginning; *NoValidError when every
// checkpoint is damaged; an error naming the part and the parameter when
// the checkpoint does not fit the state (another model, another dataset),
// in which case the state is left as it was.
func (c *Checkpointer) Load(ctx context.Context) (Info, error) {
	if c.closed {
		return Info{}, ErrClosed
	}
	if err := c.Flush(ctx); err != nil {
		return Info{}, err
	}
	var env []byte
	if c.cfg.rank() == 0 {
		env = c.readNewest()
	}
	got, err := c.cfg.b.BroadcastBytes(ctx, env, 0)
	if err != nil {
		return Info{}, fmt.Errorf("checkpoint: receiving the checkpoint from rank 0: %w", err)
	}
	info, parts, err := c.open(got)
	if err != nil {
		return info, err
	}
	if err := c.state.Decode(parts); err != nil {
		return info, fmt.Errorf("checkpoint: %s does not fit this training state: %w", info.Path, err)
	}
	return info, nil
}

// readNewest finds the newest valid checkpoint (rank 0) and returns the
// envelope that tells every rank about it: a kind byte, the length of the
// JSON head (uint32, little-endian), the head, then the file.
func (c *Checkpointer) readNewest() []byte {
	if err := removeTemps(c.dir); err != nil {
		c.logf("%v", err)
	}
	f, err := newest(c.dir)
	for _, s := range f.skipped {
		c.logf("checkpoint: passing over %s", s)
	}
	head := loadHead{Path: f.path, Skipped: f.skipped}
	kind := byte(loadFound)
	var nv *NoValidError
	switch {
	case errors.Is(err, ErrNoCheckpoint):
		kind = loadNone
	case errors.As(err, &nv):
		kind = loadInvalid
	case err != nil:
		kind, head.Err = loadFailed, err.Error()
	}
	js, _ := json.Marshal(&head) // strings only: cannot fail
	env := make([]byte, 0, 5+len(js)+len(f.file))
	env = append(env, kind)
	env = binary.LittleEndian.AppendUint32(env, uint32(len(js)))
	env = append(env, js...)
	return append(env, f.file...)
}

// open reads rank 0's envelope: the checkpoint's Info and parts, or the
// error rank 0 met.
func (c *Checkpointer) open(env []byte) (Info, []elastic.Part, error) {
	if len(env) < 5 {
		return Info{}, nil, fmt.Errorf("checkpoint: rank 0 sent %d bytes", len(env))
	}
	n := int(binary.LittleEndian.Uint32(env[1:5]))
	if 5+n > len(env) {
		return Info{}, nil, fmt.Errorf("checkpoint: rank 0 sent a head of %d bytes in %d", n, len(env))
	}
	var head loadHead
	if err := json.Unmarshal(env[5:5+n], &head); err != nil {
		return Info{}, nil, fmt.Errorf("checkpoint: rank 0's head: %w", err)
	}
	info := Info{Path: head.Path, Skipped: head.Skipped}
	switch env[0] {
	case loadNone:
		return info, nil, fmt.Errorf("%w in %s", ErrNoCheckpoint, c.dir)
	case loadInvalid:
		return info, nil, &NoValidError{Dir: c.dir, Skipped: head.Skipped}
	case loadFailed:
		return info, nil, fmt.Errorf("checkpoint: rank 0 could not read %s: %s", c.dir, head.Err)
	}
	file := env[5+n:]
	m, parts, err := decode(file)
	if err != nil {
		return info, nil, fmt.Errorf("checkpoint: %s as received from rank 0 is damaged: %w", head.Path, err)
	}
	info.Step, info.Written, info.Bytes = m.Step, m.Written, m.Size
	return info, parts, nil
}
