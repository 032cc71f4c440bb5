package elastic

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"reflect"
	"sort"
)

// Objects is the Handler of named gob-encodable values, Horovod's
// ObjectState: the epoch, the batch, a best score, a struct of counters. It
// holds pointers to the caller's variables; a snapshot is their gob
// encoding, and Restore and Sync decode into fresh values and assign them
// through the pointers (so fields absent from the snapshot, which gob does
// not send when zero, come back as zero, not as the live value).
type Objects struct {
	names []string // sorted
	ptrs  []reflect.Value
	saved []byte
}

// NewObjects returns the handler of values, which maps names to non-nil
// pointers to gob-encodable values, e.g. {"epoch": &epoch, "batch": &batch}.
// The values are encoded in name order. NewObjects checks that the values
// encode; it does not snapshot them (NewState does).
func NewObjects(values map[string]any) (*Objects, error) {
	o := &Objects{}
	for name := range values {
		o.names = append(o.names, name)
	}
	sort.Strings(o.names)
	for _, name := range o.names {
		v := reflect.ValueOf(values[name])
		if v.Kind() != reflect.Pointer || v.IsNil() {
			return nil, fmt.Errorf("elastic: object %q is %T, not a non-nil pointer", name, values[name])
		}
		o.ptrs = append(o.ptrs, v)
	}
	if _, err := o.encode(); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *Objects) encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := gob.NewEncoder(&buf)
	for i, p := range o.ptrs {
		if err := enc.Encode(p.Interface()); err != nil {
			return nil, fmt.Errorf("elastic: encoding object %q: %w", o.names[i], err)
		}
	}
	return buf.Bytes(), nil
}

// decode sets the values from b, all or none.
func (o *Objects) decode(b []byte) error {
	dec := gob.NewDecoder(bytes.NewReader(b))
	fresh := make([]reflect.Value, len(o.ptrs))
	for i, p := range o.ptrs {
		fresh[i] = reflect.New(p.Type().Elem())
		if err := dec.Decode(fresh[i].Interface()); err != nil {
			return fmt.Errorf("elastic: decoding object %q: %w", o.names[i], err)
		}
	}
	for i, p := range o.ptrs {
		p.Elem().Set(fresh[i].Elem())
	}
	return nil
}

// Save snapshots the values.
func (o *Objects) Save() error {
	b, err := o.encode()
	if err != nil {
		return err
	}
	o.saved = b
	return nil
}

// Restore sets the values to the last snapshot; without one it does
// nothing.
func (o *Objects) Restore() error {
	if o.saved == nil {
		return nil
	}
	return o.decode(o.saved)
}

// Encode returns the gob encoding of the live values (Codec).
func (o *Objects) Encode() ([]byte, error) { return o.encode() }

// Decode sets the values from b, all or none (Codec).
func (o *Objects) Decode(b []byte) error { return o.decode(b) }

// Sync sets every rank's values to rank 0's live values and snapshots them.
func (o *Objects) Sync(ctx context.Context, b Broadcaster) error { return syncCodec(ctx, o, b) }
