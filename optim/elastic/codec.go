package elastic

import (
	"context"
	"fmt"
)

// Codec is a Handler whose live values can be written as bytes and set
// from them: the one description of a part of the training state that
// Sync sends from rank 0 to every rank and that a checkpoint (package
// optim/checkpoint) writes to disk. Objects, Optimizer and SamplerHandler
// are Codecs; a Handler of one's own becomes one by adding these two
// methods.
type Codec interface {
	Handler
	// Encode returns the live values as bytes that do not alias them: a
	// snapshot that later training does not change.
	Encode() ([]byte, error)
	// Decode sets the live values from bytes that Encode returned, here or
	// on another rank or in another run. It checks everything first: an
	// error leaves the live values as they were. It does not snapshot.
	Decode(b []byte) error
}

// Part is one named part of an encoded State: the bytes that the Codec of
// the handler of that name encoded.
type Part struct {
	Name string
	Data []byte
}

// syncCodec is Sync of a Codec: rank 0's encoding is broadcast, every rank
// decodes it and snapshots the result.
func syncCodec(ctx context.Context, c Codec, b Broadcaster) error {
	mine, err := c.Encode()
	if err != nil {
		return err
	}
	got, err := b.BroadcastBytes(ctx, mine, 0)
	if err != nil {
		return err
	}
	if err := c.Decode(got); err != nil {
		return err
	}
	return c.Save()
}

// codecs returns the handlers as Codecs, or an error naming the first
// that is not one.
func (s *State) codecs() ([]Codec, error) {
	cs := make([]Codec, len(s.handlers))
	for i, h := range s.handlers {
		c, ok := h.(Codec)
		if !ok {
			return nil, fmt.Errorf("elastic: handler %q (%T) has no Encode and Decode: it cannot be written or read", s.names[i], h)
		}
		cs[i] = c
	}
	return cs, nil
}

// Encode returns every handler's live values, one Part per handler in the
// order given to NewState. Every handler must be a Codec. The parts do not
// alias the live values.
func (s *State) Encode() ([]Part, error) {
	cs, err := s.codecs()
	if err != nil {
		return nil, err
	}
	parts := make([]Part, len(cs))
	for i, c := range cs {
		b, err := c.Encode()
		if err != nil {
			return nil, fmt.Errorf("elastic: encoding %q: %w", s.names[i], err)
		}
		parts[i] = Part{Name: s.names[i], Data: b}
	}
	return parts, nil
}

// Decode sets every handler's live values from parts (as Encode returned
// them, here or in another run) and snapshots them, so that a Restore
// returns to the decoded values. The parts must name exactly the State's
// handlers, in any order. It is all or nothing: when a part is missing,
// unknown, or does not fit its handler (a parameter's name or shape
// differs, a sampler over another dataset), the error names it and every
// handler is set back to its last snapshot.
func (s *State) Decode(parts []Part) error {
	cs, err := s.codecs()
	if err != nil {
		return err
	}
	byName := make(map[string][]byte, len(parts))
	for _, p := range parts {
		if _, dup := byName[p.Name]; dup {
			return fmt.Errorf("elastic: part %q appears twice", p.Name)
		}
		byName[p.Name] = p.Data
	}
	for _, name := range s.names {
		if _, ok := byName[name]; !ok {
			return fmt.Errorf("elastic: no part %q (the parts are %v)", name, partNames(parts))
		}
		delete(byName, name)
	}
	for name := range byName {
		return fmt.Errorf("elastic: part %q has no handler (the handlers are %v)", name, s.names)
	}
	for _, p := range parts {
		byName[p.Name] = p.Data
	}
	for i, c := range cs {
		if err := c.Decode(byName[s.names[i]]); err != nil {
			err = fmt.Errorf("elastic: decoding %q: %w", s.names[i], err)
			if rerr := s.Restore(); rerr != nil {
				return fmt.Errorf("%w; and going back to the last snapshot: %v", err, rerr)
			}
			return err
		}
	}
	return s.save()
}

func partNames(parts []Part) []string {
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.Name
	}
	return names
}
