package wire

import (
	"bytes"
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
