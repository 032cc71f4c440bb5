package elastic

import (
	"context"
	"strings"
	"testing"
)

// TestStateEncodeDecode: one model's parts decode into another, which then
// holds the same values; Decode snapshots them.
func TestStateEncodeDecode(t *testing.T) {
	a, b := newModel(t, 0, 2, nil), newModel(t, 1, 2, nil)
	a.train(t)
	parts, err := a.state.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(partNames(parts), ","); got != "objects,optimizer,sampler" {
		t.Fatalf("parts %s", got)
	}
	want := a.snap()
	a.train(t) // the parts do not alias the live values
	if err := b.state.Decode(parts); err != nil {
		t.Fatal(err)
	}
	// b's sampler keeps its own rank and size: only the epoch and
	// position come from a.
	sameSnap(t, "decoded", b.snap(), want)
	b.train(t)
	if err := b.state.Restore(); err != nil {
		t.Fatal(err)
	}
	sameSnap(t, "restored after decoding", b.snap(), want)
}

// TestStateDecodeAllOrNothing: parts that are missing, unknown, doubled or
// that do not fit leave every handler as it was, with an error that names
// the part.
func TestStateDecodeAllOrNothing(t *testing.T) {
	a := newModel(t, 0, 2, nil)
	parts, err := a.state.Encode()
	if err != nil {
		t.Fatal(err)
	}
	other := newModel(t, 1, 2, nil)
	other.train(t)
	if err := other.state.Commit(); err != nil {
		t.Fatal(err)
	}
	before := other.snap()
	bad := func(mod func([]Part) []Part) []Part {
		c := append([]Part(nil), parts...)
		return mod(c)
	}
	for _, c := range []struct {
		name  string
		parts []Part
		want  string
	}{
		{"missing", bad(func(p []Part) []Part { return p[:2] }), `no part "sampler"`},
		{"unknown", bad(func(p []Part) []Part { return append(p, Part{Name: "extra"}) }), `part "extra" has no handler`},
		{"twice", bad(func(p []Part) []Part { return append(p, p[0]) }), `part "objects" appears twice`},
		// The sampler decodes last: the others were already set.
		{"corrupt sampler", bad(func(p []Part) []Part { p[2] = Part{Name: "sampler", Data: []byte("junk")}; return p }), `decoding "sampler"`},
		{"corrupt optimizer", bad(func(p []Part) []Part { p[1] = Part{Name: "optimizer", Data: p[1].Data[:len(p[1].Data)-1]}; return p }), `decoding "optimizer"`},
	} {
		err := other.state.Decode(c.parts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
		sameSnap(t, c.name, other.snap(), before)
	}
}

// TestStateEncodeNeedsCodecs: a handler without Encode and Decode is named.
func TestStateEncodeNeedsCodecs(t *testing.T) {
	s, err := NewState(nil, Named("plain", plainHandler{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Encode(); err == nil || !strings.Contains(err.Error(), `handler "plain"`) {
		t.Fatalf("encode: %v", err)
	}
}

type plainHandler struct{}

func (plainHandler) Save() error    { return nil }
func (plainHandler) Restore() error { return nil }
func (plainHandler) Sync(_ context.Context, _ Broadcaster) error {
	return nil
}

// FuzzDecode: no bytes panic a Codec's Decode, and what it refuses leaves
// the values as they were.
func FuzzDecode(f *testing.F) {
	m := newModel(f, 0, 1, nil)
	parts, err := m.state.Encode()
	if err != nil {
		f.Fatal(err)
	}
	for i, p := range parts {
		f.Add(i, p.Data)
	}
	f.Fuzz(func(t *testing.T, which int, b []byte) {
		m := newModel(t, 0, 1, nil)
		cs, err := m.state.codecs()
		if err != nil {
			t.Fatal(err)
		}
		before := m.snap()
		c := cs[(which%len(cs)+len(cs))%len(cs)]
		if err := c.Decode(b); err != nil {
			sameSnap(t, "refused", m.snap(), before)
		}
	})
}
