package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestFarewellRoundTrip(t *testing.T) {
	for _, f := range []Farewell{{}, {Kind: FarewellShutdown}, {Kind: FarewellStall, Text: "stalled"},
		{Kind: FarewellFailed, Text: "boom\x00é"}} {
		got, err := DecodeFarewell(AppendFarewell(nil, f))
		if err != nil || got != f {
			t.Errorf("DecodeFarewell(AppendFarewell(%+v)) = %+v, %v", f, got, err)
		}
	}
	for _, b := range [][]byte{nil, {byte(FarewellFailed) + 1}} {
		if _, err := DecodeFarewell(b); err == nil {
			t.Errorf("DecodeFarewell(%v) succeeded", b)
		}
	}
}

func TestSetsInitRoundTrip(t *testing.T) {
	for _, s := range []SetsInit{{}, {Count: 3}, {Problem: "process set 0 is nil", Count: 1},
		{Count: 2, CommRanks: []int{-1, 0, 5}}} {
		got, err := DecodeSetsInit(AppendSetsInit(nil, &s))
		if err != nil || !reflect.DeepEqual(got, s) {
			t.Errorf("round trip of %+v = %+v, %v", s, got, err)
		}
	}
	if _, err := DecodeSetsInit(AppendSetsInit(nil, &SetsInit{Count: -1})); err == nil {
		t.Error("a negative count decoded")
	}
	if _, err := DecodeSetsInit(AppendSetsInit(nil, &SetsInit{CommRanks: []int{-2}})); err == nil {
		t.Error("a communicator rank of -2 decoded")
	}
}

func TestSetRanksRoundTrip(t *testing.T) {
	for _, s := range []SetRanks{{}, {Sets: [][]int{nil, {0, 1}, {2}}}} {
		got, err := DecodeSetRanks(AppendSetRanks(nil, &s))
		if err != nil || !reflect.DeepEqual(got, s) {
			t.Errorf("round trip of %+v = %+v, %v", s, got, err)
		}
	}
}

func TestSetOpRoundTrip(t *testing.T) {
	for _, o := range []SetOp{{Add: true, Ranks: []int{0, 2}}, {ID: 3}} {
		got, err := DecodeSetOp(AppendSetOp(nil, &o))
		if err != nil || !reflect.DeepEqual(got, o) {
			t.Errorf("round trip of %+v = %+v, %v", o, got, err)
		}
	}
	// The encoding the ranks compare byte for byte.
	if got := AppendSetOp(nil, &SetOp{Add: true, Ranks: []int{0, 2}}); !bytes.Equal(got, []byte{'a', 4, 0, 4}) {
		t.Errorf("AppendSetOp(add [0 2]) = %v", got)
	}
	if _, err := DecodeSetOp([]byte{'x'}); err == nil {
		t.Error("a bad kind decoded")
	}
}

func TestTuningRoundTrip(t *testing.T) {
	for _, tu := range []Tuning{{}, {FusionBytes: 64 << 20, CycleTimeNs: 5e6, HierarchicalAllgather: true,
		ChunkBytes: 4 << 20, FusionChunkBytes: 256 << 10, CacheEnabled: true, Done: true}, {FusionBytes: -1}} {
		b := AppendTuning(nil, &tu)
		if len(b) != TuningSize {
			t.Fatalf("AppendTuning gave %d bytes, want %d", len(b), TuningSize)
		}
		got, err := DecodeTuning(b)
		if err != nil || got != tu {
			t.Errorf("round trip of %+v = %+v, %v", tu, got, err)
		}
	}
	b := AppendTuning(nil, &Tuning{})
	b[32] = 8
	if _, err := DecodeTuning(b); err == nil {
		t.Error("bad flags decoded")
	}
	if _, err := DecodeTuning(b[:10]); err == nil {
		t.Error("a short setting decoded")
	}
}

func TestSettingsRoundTrip(t *testing.T) {
	for _, s := range [][]Setting{{}, {{"A", "1"}, {"B", ""}}} {
		got, err := DecodeSettings(AppendSettings(nil, s))
		if err != nil || len(got) != len(s) || (len(s) > 0 && !reflect.DeepEqual(got, s)) {
			t.Errorf("round trip of %v = %v, %v", s, got, err)
		}
	}
}

func TestDecodeSettingsErrors(t *testing.T) {
	enc := func(s ...Setting) []byte { return AppendSettings(nil, s) }
	good := enc(Setting{"A", "1"}, Setting{"B", "2"})
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "empty"},
		{"version", append([]byte{9}, good[1:]...), "version 9"},
		{"count", []byte{settingsVersion}, "bad count"},
		{"too many", []byte{settingsVersion, 5, 1, 'A'}, "5 settings"},
		{"truncated name", enc(Setting{"NAMEXYZ", "1"})[:6], "truncated name"},
		{"truncated value", good[:len(good)-1], "truncated value of B"},
		{"trailing", append(good, 0), "1 trailing bytes"},
		{"empty name", enc(Setting{"", "1"}), "empty name"},
		{"twice", enc(Setting{"A", "1"}, Setting{"A", "1"}), "A given twice"},
	} {
		_, err := DecodeSettings(tc.b)
		if !errors.Is(err, ErrBadSettings) || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("%s: DecodeSettings = %v, want ErrBadSettings with %q", tc.name, err, tc.want)
		}
	}
}
