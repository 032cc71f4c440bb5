package optim

import (
	"errors"
	"fmt"
	"sort"

	"github.com/gohorovod/gohorovod/tensor"
)

// Param is one named trainable parameter: its value and the gradient of the
// loss with respect to it. Both are host tensors of the same dtype (float32
// or float64) and shape; they usually wrap the model's own slices, so that an
// optimizer step updates the model in place.
type Param struct {
	Name  string
	Value *tensor.Tensor
	Grad  *tensor.Tensor
}

// Optimizer updates a fixed set of named parameters from their gradients.
// An Optimizer is used by one goroutine at a time.
type Optimizer interface {
	// Params returns the parameters, in the order they were given. The
	// caller must not modify the slice.
	Params() []Param
	// Step applies one update to every parameter from its current gradient.
	Step() error
	// ZeroGrad sets every gradient to zero.
	ZeroGrad() error
	// LR returns the learning rate of the next step.
	LR() float64
	// SetLR sets the learning rate of the next steps (schedules call it).
	SetLR(lr float64)
	// State returns a deep copy of the complete optimizer state.
	State() *State
	// SetState replaces the optimizer state by a copy of s, which must come
	// from an optimizer of the same kind over parameters with the same
	// names, dtypes and shapes.
	SetState(s *State) error
}

// State is an optimizer's complete state: enough, with the parameter values,
// to continue training exactly where it stopped.
type State struct {
	// Kind names the algorithm ("sgd", "adam", "adamw", "rmsprop", "adagrad").
	Kind string
	// Scalars holds the hyper-parameters ("lr", "momentum", "beta1", ...)
	// and the number of steps taken ("step").
	Scalars map[string]float64
	// Tensors holds the per-parameter buffers, keyed by SlotKey(param, slot).
	Tensors map[string]*tensor.Tensor
}

// SlotKey returns the key of a per-parameter buffer in State.Tensors:
// "<param>/<slot>", e.g. "fc1.weight/momentum".
func SlotKey(param, slot string) string { return param + "/" + slot }

// Names returns the keys of s.Tensors in sorted order, the order in which
// ranks broadcast them.
func (s *State) Names() []string {
	names := make([]string, 0, len(s.Tensors))
	for k := range s.Tensors {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Clone returns a deep copy of s.
func (s *State) Clone() *State {
	c := &State{Kind: s.Kind, Scalars: make(map[string]float64, len(s.Scalars)), Tensors: make(map[string]*tensor.Tensor, len(s.Tensors))}
	for k, v := range s.Scalars {
		c.Scalars[k] = v
	}
	for k, t := range s.Tensors {
		c.Tensors[k] = t.Clone()
	}
	return c
}

// ErrState is returned (wrapped) by SetState when a State does not fit the
// optimizer.
var ErrState = errors.New("optim: state does not fit the optimizer")

// ErrParams is returned (wrapped) by constructors given an invalid
// parameter list.
var ErrParams = errors.New("optim: invalid parameters")

// CheckParams validates a parameter list: at least one parameter, unique
// non-empty names, host tensors of float32 or float64, gradient of the same
// dtype and shape as the value.
func CheckParams(params []Param) error {
	if len(params) == 0 {
		return fmt.Errorf("%w: no parameters", ErrParams)
	}
	seen := make(map[string]bool, len(params))
	for i, p := range params {
		if p.Name == "" {
			return fmt.Errorf("%w: parameter %d has no name", ErrParams, i)
		}
		if seen[p.Name] {
			return fmt.Errorf("%w: duplicate parameter name %q", ErrParams, p.Name)
		}
		seen[p.Name] = true
		if p.Value == nil || p.Grad == nil {
			return fmt.Errorf("%w: parameter %q has a nil value or gradient", ErrParams, p.Name)
		}
		dt := p.Value.DType()
		if dt != tensor.Float32 && dt != tensor.Float64 {
			return fmt.Errorf("%w: parameter %q is %v; optimizers take float32 or float64", ErrParams, p.Name, dt)
		}
		if p.Value.Device().Kind != tensor.CPU || p.Grad.Device().Kind != tensor.CPU {
			return fmt.Errorf("%w: parameter %q is not in host memory", ErrParams, p.Name)
		}
		if p.Grad.DType() != dt || !p.Grad.Shape().Equal(p.Value.Shape()) {
			return fmt.Errorf("%w: parameter %q: gradient %v does not match value %v", ErrParams, p.Name, p.Grad, p.Value)
		}
	}
	return nil
}

// ZeroGrads sets the gradient of every parameter to zero.
func ZeroGrads(params []Param) {
	for _, p := range params {
		clear(p.Grad.Bytes())
	}
}

// float is the element type of parameters an optimizer updates.
type float interface{ ~float32 | ~float64 }

// core is what every optimizer here shares: the parameters, their named
// buffers, the scalar hyper-parameters (with "lr" and "step") and the kind.
type core struct {
	kind    string
	params  []Param
	slots   []string                    // slot names per parameter, e.g. "momentum"
	buf     []map[string]*tensor.Tensor // per parameter: slot → buffer
	scalars map[string]float64
}

func newCore(kind string, params []Param, slots []string, scalars map[string]float64) (core, error) {
	if err := CheckParams(params); err != nil {
		return core{}, err
	}
	for k, v := range scalars {
		if v < 0 {
			return core{}, fmt.Errorf("optim: %s: %s = %g must be >= 0", kind, k, v)
		}
	}
	c := core{kind: kind, params: append([]Param(nil), params...), slots: slots, scalars: scalars}
	c.scalars["step"] = 0
	c.buf = make([]map[string]*tensor.Tensor, len(params))
	for i, p := range params {
		c.buf[i] = make(map[string]*tensor.Tensor, len(slots))
		for _, s := range slots {
			c.buf[i][s] = tensor.New(p.Value.DType(), p.Value.Shape()...)
		}
	}
	return c, nil
}

func (c *core) Params() []Param { return c.params }

func (c *core) ZeroGrad() error {
	ZeroGrads(c.params)
	return nil
}

func (c *core) LR() float64 { return c.scalars["lr"] }

func (c *core) SetLR(lr float64) { c.scalars["lr"] = lr }

func (c *core) State() *State {
	s := &State{Kind: c.kind, Scalars: make(map[string]float64, len(c.scalars)), Tensors: make(map[string]*tensor.Tensor)}
	for k, v := range c.scalars {
		s.Scalars[k] = v
	}
	for i, p := range c.params {
		for _, slot := range c.slots {
			s.Tensors[SlotKey(p.Name, slot)] = c.buf[i][slot].Clone()
		}
	}
	return s
}

func (c *core) SetState(s *State) error {
	if s == nil {
		return fmt.Errorf("%w: nil state", ErrState)
	}
	if s.Kind != c.kind {
		return fmt.Errorf("%w: state of a %q optimizer given to a %q optimizer", ErrState, s.Kind, c.kind)
	}
	if len(s.Scalars) != len(c.scalars) {
		return fmt.Errorf("%w: %d scalars, want %d", ErrState, len(s.Scalars), len(c.scalars))
	}
	for k := range c.scalars {
		if _, ok := s.Scalars[k]; !ok {
			return fmt.Errorf("%w: scalar %q missing", ErrState, k)
		}
	}
	if want := len(c.params) * len(c.slots); len(s.Tensors) != want {
		return fmt.Errorf("%w: %d tensors, want %d", ErrState, len(s.Tensors), want)
	}
	for i, p := range c.params {
		for _, slot := range c.slots {
			key := SlotKey(p.Name, slot)
			t, ok := s.Tensors[key]
			if !ok {
				return fmt.Errorf("%w: tensor %q missing", ErrState, key)
			}
			dst := c.buf[i][slot]
			if t.DType() != dst.DType() || !t.Shape().Equal(dst.Shape()) || t.Device().Kind != tensor.CPU {
				return fmt.Errorf("%w: tensor %q is %v, want %v", ErrState, key, t, dst)
			}
		}
	}
	// Everything fits: copy.
	for k, v := range s.Scalars {
		c.scalars[k] = v
	}
	for i, p := range c.params {
		for _, slot := range c.slots {
			copy(c.buf[i][slot].Bytes(), s.Tensors[SlotKey(p.Name, slot)].Bytes())
		}
	}
	return nil
}

// views returns parameter i's value, gradient and named buffers as []T.
func views[T float](c *core, i int, slots ...string) (v, g []T, bufs [][]T) {
	p := c.params[i]
	bufs = make([][]T, len(slots))
	for j, s := range slots {
		bufs[j] = tensor.View[T](c.buf[i][s])
	}
	return tensor.View[T](p.Value), tensor.View[T](p.Grad), bufs
}
