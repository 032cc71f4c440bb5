package elastic

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/gob"
	"fmt"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/tensor"
)

// Optimizer is the Handler of an optim.Optimizer together with its
// parameters (Horovod's model and optimizer handlers in one, since an
// optim.Optimizer holds the model's parameters): a snapshot is a copy of
// every parameter value and the optimizer's State (buffers, learning rate,
// step count). Restore copies the values back into the parameters' own
// storage, so the model sees them.
type Optimizer struct {
	opt    optim.Optimizer
	values []*tensor.Tensor
	state  *optim.State
}

// NewOptimizer returns the handler of opt (a DistributedOptimizer or the
// optimizer it wraps). It does not snapshot (NewState does).
func NewOptimizer(opt optim.Optimizer) (*Optimizer, error) {
	if opt == nil {
		return nil, fmt.Errorf("elastic: nil optimizer")
	}
	if err := optim.CheckParams(opt.Params()); err != nil {
		return nil, fmt.Errorf("elastic: %w", err)
	}
	return &Optimizer{opt: opt}, nil
}

// Save snapshots the parameter values and the optimizer state.
func (o *Optimizer) Save() error {
	ps := o.opt.Params()
	if len(o.values) != len(ps) {
		o.values = make([]*tensor.Tensor, len(ps))
	}
	for i, p := range ps {
		if o.values[i] == nil || o.values[i].NumBytes() != p.Value.NumBytes() {
			o.values[i] = p.Value.Clone()
			continue
		}
		copy(o.values[i].Bytes(), p.Value.Bytes())
	}
	o.state = o.opt.State()
	return nil
}

// Restore copies the snapshot back into the parameters and the optimizer;
// without one it does nothing.
func (o *Optimizer) Restore() error {
	if o.state == nil {
		return nil
	}
	ps := o.opt.Params()
	for i, p := range ps {
		copy(p.Value.Bytes(), o.values[i].Bytes())
	}
	return o.opt.SetState(o.state)
}

// wireHead is the gob head of an encoded Optimizer; the bytes of the
// parameter values, then of the state's buffers, follow it raw, in the
// head's order, so that a large model is copied once into a buffer of the
// exact size.
type wireHead struct {
	Names   []string // the parameters
	Sizes   []int    // bytes of each parameter's value
	Kind    string
	Scalars map[string]float64
	Keys    []string // the state's buffers, sorted
	Buffers []wireTensor
}

// wireTensor describes one buffer of the optimizer state.
type wireTensor struct {
	DType tensor.DType
	Shape []int
	Size  int // bytes
}

// Sync sets every rank's parameters and optimizer state to rank 0's live
// ones and snapshots them. The optimizers must be of the same kind over
// parameters with the same names, dtypes and shapes; a mismatch is an error
// that names the parameter. Everything travels in one broadcast of the gob
// encoding.
func (o *Optimizer) Sync(ctx context.Context, b Broadcaster) error { return syncCodec(ctx, o, b) }

// Encode returns the parameter values and the optimizer state (Codec): the
// length of a gob head (uint32, little-endian), the head, then the raw
// bytes of the values and of the state's buffers.
func (o *Optimizer) Encode() ([]byte, error) {
	st := o.opt.State()
	h := wireHead{Kind: st.Kind, Scalars: st.Scalars, Keys: st.Names()}
	total := 0
	for _, p := range o.opt.Params() {
		h.Names = append(h.Names, p.Name)
		h.Sizes = append(h.Sizes, p.Value.NumBytes())
		total += p.Value.NumBytes()
	}
	for _, k := range h.Keys {
		t := st.Tensors[k]
		h.Buffers = append(h.Buffers, wireTensor{DType: t.DType(), Shape: t.Shape(), Size: t.NumBytes()})
		total += t.NumBytes()
	}
	var head bytes.Buffer
	if err := gob.NewEncoder(&head).Encode(&h); err != nil {
		return nil, fmt.Errorf("encoding the optimizer: %w", err)
	}
	out := make([]byte, 0, 4+head.Len()+total)
	out = binary.LittleEndian.AppendUint32(out, uint32(head.Len()))
	out = append(out, head.Bytes()...)
	for _, p := range o.opt.Params() {
		out = append(out, p.Value.Bytes()...)
	}
	for _, k := range h.Keys {
		out = append(out, st.Tensors[k].Bytes()...)
	}
	return out, nil
}

// decodeHead reads the head of an encoded Optimizer and returns it with
// the raw bytes after it, checked to be as long as the head says.
func decodeHead(b []byte) (wireHead, []byte, error) {
	var h wireHead
	if len(b) < 4 || int64(binary.LittleEndian.Uint32(b)) > int64(len(b)-4) {
		return h, nil, fmt.Errorf("decoding the optimizer: %d bytes, too short for its head", len(b))
	}
	n := 4 + int(binary.LittleEndian.Uint32(b))
	if err := gob.NewDecoder(bytes.NewReader(b[4:n])).Decode(&h); err != nil {
		return h, nil, fmt.Errorf("decoding the optimizer: %w", err)
	}
	if len(h.Sizes) != len(h.Names) || len(h.Buffers) != len(h.Keys) {
		return h, nil, fmt.Errorf("decoding the optimizer: %d names of %d sizes, %d buffers of %d keys", len(h.Names), len(h.Sizes), len(h.Buffers), len(h.Keys))
	}
	want := 0
	for _, s := range h.Sizes {
		want += s
	}
	for _, t := range h.Buffers {
		want += t.Size
	}
	if raw := b[n:]; len(raw) != want {
		return h, nil, fmt.Errorf("decoding the optimizer: %d bytes of values and buffers, its head says %d", len(raw), want)
	}
	return h, b[n:], nil
}

// Decode sets the parameter values and the optimizer state from b
// (Codec). The parameters in b must have this optimizer's names, in its
// order, and sizes, and the state its kind and buffers: otherwise the
// error names the first parameter or buffer that differs, and nothing is
// changed.
func (o *Optimizer) Decode(b []byte) error {
	ps := o.opt.Params()
	h, raw, err := decodeHead(b)
	if err != nil {
		return err
	}
	if len(h.Names) != len(ps) {
		return fmt.Errorf("the state has %d parameters, this model %d", len(h.Names), len(ps))
	}
	values := make([][]byte, len(ps))
	for i, p := range ps {
		if h.Names[i] != p.Name {
			return fmt.Errorf("parameter %d is %q in the state, %q in this model", i, h.Names[i], p.Name)
		}
		if h.Sizes[i] != p.Value.NumBytes() {
			return fmt.Errorf("parameter %q has %d bytes in the state, %d in this model (shape %v)", p.Name, h.Sizes[i], p.Value.NumBytes(), p.Value.Shape())
		}
		values[i], raw = raw[:h.Sizes[i]], raw[h.Sizes[i]:]
	}
	s := &optim.State{Kind: h.Kind, Scalars: h.Scalars, Tensors: make(map[string]*tensor.Tensor, len(h.Keys))}
	if s.Scalars == nil {
		s.Scalars = map[string]float64{}
	}
	for i, k := range h.Keys {
		t := h.Buffers[i]
		tt, err := tensor.FromBytes(t.DType, raw[:t.Size], t.Shape...)
		if err != nil {
			return fmt.Errorf("optimizer buffer %q: %w", k, err)
		}
		s.Tensors[k], raw = tt, raw[t.Size:]
	}
	// SetState checks the state first (and copies it), so that a mismatch
	// leaves the parameters as they were.
	if err := o.opt.SetState(s); err != nil {
		return err
	}
	for i, p := range ps {
		copy(p.Value.Bytes(), values[i])
	}
	return nil
}
