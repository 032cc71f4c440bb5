package elastic

import (
	"bytes"
	"context"
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

// wireTensor and wireOptimizer are the gob form of a snapshot that Sync
// sends.
type wireTensor struct {
	DType tensor.DType
	Shape []int
	Data  []byte
}

type wireOptimizer struct {
	Names   []string
	Values  [][]byte
	Kind    string
	Scalars map[string]float64
	Tensors map[string]wireTensor
}

// Sync sets every rank's parameters and optimizer state to rank 0's live
// ones and snapshots them. The optimizers must be of the same kind over
// parameters with the same names, dtypes and shapes; a mismatch is an error
// that names the parameter. Everything travels in one broadcast of the gob
// encoding.
func (o *Optimizer) Sync(ctx context.Context, b Broadcaster) error { return syncCodec(ctx, o, b) }

// Encode returns the gob encoding of the parameter values and the
// optimizer state (Codec).
func (o *Optimizer) Encode() ([]byte, error) {
	st := o.opt.State()
	w := wireOptimizer{Kind: st.Kind, Scalars: st.Scalars, Tensors: make(map[string]wireTensor, len(st.Tensors))}
	for _, p := range o.opt.Params() {
		w.Names = append(w.Names, p.Name)
		w.Values = append(w.Values, p.Value.Bytes())
	}
	for k, t := range st.Tensors {
		w.Tensors[k] = wireTensor{DType: t.DType(), Shape: t.Shape(), Data: t.Bytes()}
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(&w); err != nil {
		return nil, fmt.Errorf("encoding the optimizer: %w", err)
	}
	return buf.Bytes(), nil
}

// Decode sets the parameter values and the optimizer state from b
// (Codec). The parameters in b must have this optimizer's names, in its
// order, and sizes, and the state its kind and buffers: otherwise the
// error names the first parameter or buffer that differs, and nothing is
// changed.
func (o *Optimizer) Decode(b []byte) error {
	ps := o.opt.Params()
	var r wireOptimizer
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&r); err != nil {
		return fmt.Errorf("decoding the optimizer: %w", err)
	}
	if len(r.Names) != len(ps) || len(r.Values) != len(ps) {
		return fmt.Errorf("the state has %d parameters, this model %d", len(r.Names), len(ps))
	}
	for i, p := range ps {
		if r.Names[i] != p.Name {
			return fmt.Errorf("parameter %d is %q in the state, %q in this model", i, r.Names[i], p.Name)
		}
		if len(r.Values[i]) != p.Value.NumBytes() {
			return fmt.Errorf("parameter %q has %d bytes in the state, %d in this model (shape %v)", p.Name, len(r.Values[i]), p.Value.NumBytes(), p.Value.Shape())
		}
	}
	s := &optim.State{Kind: r.Kind, Scalars: r.Scalars, Tensors: make(map[string]*tensor.Tensor, len(r.Tensors))}
	if s.Scalars == nil {
		s.Scalars = map[string]float64{}
	}
	for k, t := range r.Tensors {
		tt, err := tensor.FromBytes(t.DType, t.Data, t.Shape...)
		if err != nil {
			return fmt.Errorf("optimizer buffer %q: %w", k, err)
		}
		s.Tensors[k] = tt
	}
	// SetState checks the state first, so that a mismatch leaves the
	// parameters as they were.
	if err := o.opt.SetState(s); err != nil {
		return err
	}
	for i, p := range ps {
		copy(p.Value.Bytes(), r.Values[i])
	}
	return nil
}
