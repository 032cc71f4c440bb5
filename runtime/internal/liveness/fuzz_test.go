package liveness

import (
	"bufio"
	"bytes"
	"testing"
	"time"
)

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// FuzzDecode: the channel's decoders never panic, and what they accept
// encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(appendFrozen(nil, Frozen{Rank: 1, Host: "h", Silent: time.Second})[1:])
	f.Add(appendFrozen(nil, Frozen{Rank: 2, Host: "n2", Silent: 31 * time.Second, Unreachable: true})[1:])
	f.Add([]byte{0, 0, 0, 1, 2, 'h', 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		if fr, err := readFrozen(bufioReader(b), 8); err == nil {
			again := appendFrozen(nil, fr)[1:]
			if !bytes.HasPrefix(b, again) {
				t.Fatalf("notice %x decodes to %+v, which encodes to %x", b, fr, again)
			}
		}
		if r, host, err := readHello(bufioReader(b), 8); err == nil {
			var w bytes.Buffer
			if err := writeHello(&w, r, host); err != nil || !bytes.HasPrefix(b, w.Bytes()) {
				t.Fatalf("hello %x decodes to %d %q, which encodes to %x", b, r, host, w.Bytes())
			}
		}
	})
}
