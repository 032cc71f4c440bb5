package wire

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

func TestLivenessRoundTrip(t *testing.T) {
	for _, l := range []Liveness{
		{},
		{Timeout: 30 * time.Second, Key: bytes.Repeat([]byte{7}, 32), Addrs: []string{"127.0.0.1:4000", "[fe80::1]:4000"}, Host: "node-0"},
	} {
		got, err := DecodeLiveness(AppendLiveness(nil, l))
		if err != nil || !reflect.DeepEqual(got, l) {
			t.Errorf("round trip of %+v = %+v, %v", l, got, err)
		}
	}
	b := AppendLiveness(nil, Liveness{Timeout: time.Second, Key: []byte{1, 2}, Addrs: []string{"a:1"}})
	for i := range b {
		if _, err := DecodeLiveness(b[:i]); err == nil {
			t.Errorf("a message cut to %d of %d bytes decoded", i, len(b))
		}
	}
	if _, err := DecodeLiveness(AppendLiveness(nil, Liveness{Timeout: -1})); err == nil {
		t.Error("a negative timeout decoded")
	}
}

func FuzzDecodeLiveness(f *testing.F) {
	f.Add(AppendLiveness(nil, Liveness{Timeout: time.Second, Key: []byte{1}, Addrs: []string{"h:1"}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeLiveness(b)
		if err != nil {
			return
		}
		again := AppendLiveness(nil, l)
		l2, err := DecodeLiveness(again)
		if err != nil || !reflect.DeepEqual(l, l2) {
			t.Fatalf("re-decode of %+v: %+v, %v", l, l2, err)
		}
	})
}
