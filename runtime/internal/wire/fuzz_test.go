package wire

import (
	"bytes"
	"errors"
	"testing"
)

func FuzzDecodeRequestList(f *testing.F) {
	l := sampleRequests()
	f.Add(AppendRequestList(nil, &l))
	f.Add([]byte{})
	f.Add([]byte{0, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeRequestList(b)
		if err != nil {
			return
		}
		// Whatever decodes must encode back to a message that decodes to
		// the same value.
		again := AppendRequestList(nil, &got)
		got2, err := DecodeRequestList(again)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !bytes.Equal(AppendRequestList(nil, &got2), again) {
			t.Fatalf("encoding not stable")
		}
	})
}

func FuzzDecodeResponseList(f *testing.F) {
	l := sampleResponses()
	f.Add(AppendResponseList(nil, &l))
	f.Add([]byte{})
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeResponseList(b)
		if err != nil {
			return
		}
		again := AppendResponseList(nil, &got)
		got2, err := DecodeResponseList(again)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !bytes.Equal(AppendResponseList(nil, &got2), again) {
			t.Fatalf("encoding not stable")
		}
	})
}

// fuzzStable checks, for any bytes that decode, that the value re-encodes
// to bytes that decode to a value encoding to the same bytes again.
func fuzzStable[T any](t *testing.T, b []byte, dec func([]byte) (T, error), enc func(T) []byte) {
	got, err := dec(b)
	if err != nil {
		return
	}
	again := enc(got)
	got2, err := dec(again)
	if err != nil {
		t.Fatalf("re-decode: %v", err)
	}
	if !bytes.Equal(enc(got2), again) {
		t.Fatalf("encoding not stable")
	}
}

func FuzzDecodeFarewell(f *testing.F) {
	f.Add([]byte{})
	f.Add(AppendFarewell(nil, Farewell{Kind: FarewellFailed, Text: "boom"}))
	f.Add([]byte{9})
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzStable(t, b, DecodeFarewell, func(v Farewell) []byte { return AppendFarewell(nil, v) })
	})
}

func FuzzDecodeSetsInit(f *testing.F) {
	f.Add([]byte{})
	f.Add(AppendSetsInit(nil, &SetsInit{Problem: "nil set", Count: 2, CommRanks: []int{-1, 3}}))
	f.Add([]byte{0, 2, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzStable(t, b, DecodeSetsInit, func(v SetsInit) []byte { return AppendSetsInit(nil, &v) })
	})
}

func FuzzDecodeSetRanks(f *testing.F) {
	f.Add([]byte{})
	f.Add(AppendSetRanks(nil, &SetRanks{Sets: [][]int{{0, 1}, {2}}}))
	f.Add([]byte{3, 2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzStable(t, b, DecodeSetRanks, func(v SetRanks) []byte { return AppendSetRanks(nil, &v) })
	})
}

func FuzzDecodeSetOp(f *testing.F) {
	f.Add([]byte{})
	f.Add(AppendSetOp(nil, &SetOp{Add: true, Ranks: []int{0, 2}}))
	f.Add(AppendSetOp(nil, &SetOp{ID: 4}))
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzStable(t, b, DecodeSetOp, func(v SetOp) []byte { return AppendSetOp(nil, &v) })
	})
}

func FuzzDecodeTuning(f *testing.F) {
	f.Add([]byte{})
	f.Add(AppendTuning(nil, &Tuning{FusionBytes: 1 << 26, CycleTimeNs: 1e6, CacheEnabled: true, Done: true}))
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzStable(t, b, DecodeTuning, func(v Tuning) []byte { return AppendTuning(nil, &v) })
	})
}

func FuzzDecodeSettings(f *testing.F) {
	f.Add([]byte{})
	f.Add(AppendSettings(nil, []Setting{{"A", "1"}, {"B", ""}}))
	f.Add([]byte{settingsVersion, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSettings(b)
		if err != nil && !errors.Is(err, ErrBadSettings) {
			t.Fatalf("error %v does not wrap ErrBadSettings", err)
		}
		_ = s
		fuzzStable(t, b, DecodeSettings, func(v []Setting) []byte { return AppendSettings(nil, v) })
	})
}
