package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/optim/elastic"
)

func sampleFile(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	parts := []elastic.Part{{Name: "a", Data: []byte("first part")}, {Name: "empty"}, {Name: "b", Data: bytes.Repeat([]byte{7}, 100)}}
	if _, err := encodeTo(&buf, 42, time.Unix(1, 0), parts); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestDecodeRoundTrip: a file decodes to its step and parts.
func TestDecodeRoundTrip(t *testing.T) {
	b := sampleFile(t)
	m, parts, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Step != 42 || m.Size != int64(len(b)) || m.Format != Format || len(parts) != 3 ||
		string(parts[0].Data) != "first part" || len(parts[1].Data) != 0 || len(parts[2].Data) != 100 || parts[2].Name != "b" {
		t.Fatalf("decoded %+v, %v", m, parts)
	}
}

// TestEveryDamageDetected flips each bit of a file, one at a time, and
// cuts it at every length: each is a *damageError, never a valid checkpoint.
func TestEveryDamageDetected(t *testing.T) {
	b := sampleFile(t)
	var d *damageError
	for i := range b {
		for bit := range 8 {
			c := bytes.Clone(b)
			c[i] ^= 1 << bit
			if _, _, err := decode(c); !errors.As(err, &d) {
				t.Fatalf("bit %d of byte %d flipped: %v", bit, i, err)
			}
		}
	}
	for n := range len(b) {
		if _, _, err := decode(b[:n]); !errors.As(err, &d) {
			t.Fatalf("cut at %d of %d bytes: %v", n, len(b), err)
		}
	}
}

// TestOtherFormat: a file of another format version says so.
func TestOtherFormat(t *testing.T) {
	b := sampleFile(t)
	// Re-encode the head with format 2: the checksum is the manifest's own.
	b2 := bytes.Replace(b, []byte(`"format":1`), []byte(`"format":2`), 1)
	fixManifestCRC(b2)
	if _, _, err := decode(b2); err == nil || !bytes.Contains([]byte(err.Error()), []byte("format version 2; this build reads version 1")) {
		t.Fatalf("decode: %v", err)
	}
}

// FuzzDecode: no input panics decode, and whatever it accepts re-encodes
// to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(sampleFile(f))
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, parts, err := decode(b)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if _, err := encodeTo(&buf, m.Step, m.Written, parts); err != nil {
			t.Fatal(err)
		}
		if _, _, err := decode(buf.Bytes()); err != nil {
			t.Fatalf("a re-encoded valid file does not decode: %v", err)
		}
	})
}

// fixManifestCRC recomputes the manifest checksum of a file in place.
func fixManifestCRC(b []byte) {
	n := int(binary.LittleEndian.Uint32(b[len(magic):headerLen]))
	binary.LittleEndian.PutUint32(b[headerLen+n:], crc32.Checksum(b[headerLen:headerLen+n], castagnoli))
}
