package cycle

import (
	"errors"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

func TestFarewellOf(t *testing.T) {
	boom, stalled := errors.New("boom"), errors.New("stalled")
	for _, tt := range []struct {
		failing, stall error
		shutdown       bool
		want           wire.Farewell
	}{
		{nil, nil, false, wire.Farewell{}},
		{nil, nil, true, wire.Farewell{Kind: wire.FarewellShutdown}},
		{nil, stalled, true, wire.Farewell{Kind: wire.FarewellStall, Text: "stalled"}},
		{boom, stalled, true, wire.Farewell{Kind: wire.FarewellFailed, Text: "boom"}},
	} {
		if got := FarewellOf(tt.failing, tt.stall, tt.shutdown); got != tt.want {
			t.Errorf("FarewellOf(%v, %v, %v) = %+v, want %+v", tt.failing, tt.stall, tt.shutdown, got, tt.want)
		}
	}
}

func TestFarewellCause(t *testing.T) {
	rec := func(k wire.FarewellKind, text string) []byte {
		return wire.AppendFarewell(nil, wire.Farewell{Kind: k, Text: text})
	}
	none, shut := rec(wire.FarewellNone, ""), rec(wire.FarewellShutdown, "")
	for _, tt := range []struct {
		name string
		recs [][]byte
		me   int
		want Cause
		ok   bool
	}{
		{"clean", [][]byte{shut, none}, 0, Cause{}, false},
		{"other asked", [][]byte{shut, none}, 1, Cause{Rank: 0, Farewell: wire.Farewell{Kind: wire.FarewellShutdown}}, true},
		{"both asked", [][]byte{shut, shut}, 1, Cause{}, false},
		{"failure wins", [][]byte{shut, none, rec(wire.FarewellFailed, "boom")}, 0,
			Cause{Rank: 2, Farewell: wire.Farewell{Kind: wire.FarewellFailed, Text: "boom"}}, true},
		{"lowest failure", [][]byte{none, rec(wire.FarewellStall, "a"), rec(wire.FarewellFailed, "b")}, 2,
			Cause{Rank: 1, Farewell: wire.Farewell{Kind: wire.FarewellStall, Text: "a"}}, true},
		{"unreadable", [][]byte{nil, {9}}, 0, Cause{}, false},
	} {
		got, ok := FarewellCause(tt.recs, tt.me)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}
