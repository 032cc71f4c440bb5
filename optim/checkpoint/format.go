package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/gohorovod/gohorovod/optim/elastic"
)

// Format is the version of the file format that this package writes and
// reads.
const Format = 1

// magic opens every checkpoint file.
const magic = "ghvckpt\n"

// headerLen is the fixed part before the manifest: the magic and the
// manifest's length.
const headerLen = len(magic) + 4

// maxManifest bounds the manifest's length, so that a damaged length is
// not taken for an allocation.
const maxManifest = 1 << 24

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Manifest describes one checkpoint file. The file is the magic
// "ghvckpt\n", the manifest's length (uint32, little-endian), the
// manifest (JSON), its CRC-32C (uint32, little-endian), then the parts'
// bytes one after the other.
type Manifest struct {
	// Format is the file format's version (Format).
	Format int `json:"format"`
	// Step is the training step that Save was given.
	Step int64 `json:"step"`
	// Size is the length of the whole file in bytes.
	Size int64 `json:"size"`
	// Written is when the snapshot was taken.
	Written time.Time `json:"written"`
	// Parts are the state's parts, in the order of the file.
	Parts []PartInfo `json:"parts"`
}

// PartInfo locates and checks one part of a checkpoint file.
type PartInfo struct {
	Name   string `json:"name"`
	Offset int64  `json:"offset"`
	Size   int64  `json:"size"`
	CRC32C uint32 `json:"crc32c"`
}

// manifestOf returns the manifest of a file of parts, its offsets and
// checksums computed, and the encoded head of the file: everything before
// the parts' bytes.
func manifestOf(step int64, written time.Time, parts []elastic.Part) (Manifest, []byte, error) {
	m := Manifest{Format: Format, Step: step, Written: written.UTC(), Parts: make([]PartInfo, len(parts))}
	var total int64
	for i, p := range parts {
		m.Parts[i] = PartInfo{Name: p.Name, Size: int64(len(p.Data)), CRC32C: crc32.Checksum(p.Data, castagnoli)}
		total += int64(len(p.Data))
	}
	// The offsets depend on the manifest's length, which depends on the
	// offsets' digits: encode until it settles (twice at most, in
	// practice).
	var js []byte
	for prev := -1; len(js) != prev; {
		prev = len(js)
		off := int64(headerLen + prev + 4)
		for i := range m.Parts {
			m.Parts[i].Offset = off
			off += m.Parts[i].Size
		}
		m.Size = off
		var err error
		if js, err = json.Marshal(&m); err != nil {
			return m, nil, fmt.Errorf("checkpoint: encoding the manifest: %w", err)
		}
	}
	if len(js) > maxManifest {
		return m, nil, fmt.Errorf("checkpoint: a manifest of %d bytes (%d parts) is over the limit of %d", len(js), len(parts), maxManifest)
	}
	head := make([]byte, 0, headerLen+len(js)+4)
	head = append(head, magic...)
	head = binary.LittleEndian.AppendUint32(head, uint32(len(js)))
	head = append(head, js...)
	head = binary.LittleEndian.AppendUint32(head, crc32.Checksum(js, castagnoli))
	return m, head, nil
}

// encodeTo writes a checkpoint file of parts to w and returns its
// manifest.
func encodeTo(w io.Writer, step int64, written time.Time, parts []elastic.Part) (Manifest, error) {
	m, head, err := manifestOf(step, written, parts)
	if err != nil {
		return m, err
	}
	if _, err := w.Write(head); err != nil {
		return m, err
	}
	for _, p := range parts {
		if _, err := w.Write(p.Data); err != nil {
			return m, err
		}
	}
	return m, nil
}

// damageError says why a file is not a valid checkpoint.
type damageError struct {
	Reason string
}

// Error returns the reason.
func (d *damageError) Error() string { return d.Reason }

func damaged(format string, args ...any) error {
	return &damageError{Reason: fmt.Sprintf(format, args...)}
}

// decode checks a whole checkpoint file, b, and returns its manifest and
// parts (which alias b). Anything short of a complete, unaltered file of
// this format is a *damageError that says what is wrong: a truncated file, a
// checksum that does not match (naming the part), a format version this
// build does not read.
func decode(b []byte) (Manifest, []elastic.Part, error) {
	var m Manifest
	if len(b) < headerLen+4 {
		return m, nil, damaged("truncated: %d bytes, shorter than any checkpoint", len(b))
	}
	if !bytes.Equal(b[:len(magic)], []byte(magic)) {
		return m, nil, damaged("not a checkpoint file (no %q at the start)", magic)
	}
	n := int64(binary.LittleEndian.Uint32(b[len(magic):headerLen]))
	if n > maxManifest || int64(headerLen)+n+4 > int64(len(b)) {
		return m, nil, damaged("truncated, or its manifest length (%d) is damaged: the file has %d bytes", n, len(b))
	}
	js := b[headerLen : int64(headerLen)+n]
	if got, want := crc32.Checksum(js, castagnoli), binary.LittleEndian.Uint32(b[int64(headerLen)+n:]); got != want {
		return m, nil, damaged("the manifest's checksum does not match (crc32c %08x, recorded %08x)", got, want)
	}
	if err := json.Unmarshal(js, &m); err != nil {
		return m, nil, damaged("the manifest does not decode: %v", err)
	}
	if m.Format != Format {
		return m, nil, damaged("format version %d; this build reads version %d", m.Format, Format)
	}
	if m.Size != int64(len(b)) {
		if m.Size > int64(len(b)) {
			return m, nil, damaged("truncated: %d of its %d bytes", len(b), m.Size)
		}
		return m, nil, damaged("%d bytes, its manifest says %d", len(b), m.Size)
	}
	parts, err := checkParts(m, b, int64(headerLen)+n+4)
	return m, parts, err
}

// checkParts checks that the manifest's parts tile b from start to its end
// and that each part's checksum matches, and returns them.
func checkParts(m Manifest, b []byte, start int64) ([]elastic.Part, error) {
	parts := make([]elastic.Part, len(m.Parts))
	off := start
	for i, p := range m.Parts {
		if p.Offset != off || p.Size < 0 || p.Size > int64(len(b))-off {
			return nil, damaged("part %q is at %d (%d bytes), expected at %d in a file of %d bytes", p.Name, p.Offset, p.Size, off, len(b))
		}
		data := b[off : off+p.Size : off+p.Size]
		if got := crc32.Checksum(data, castagnoli); got != p.CRC32C {
			return nil, damaged("part %q (%d bytes at %d) does not match its checksum (crc32c %08x, recorded %08x)", p.Name, p.Size, p.Offset, got, p.CRC32C)
		}
		parts[i] = elastic.Part{Name: p.Name, Data: data}
		off += p.Size
	}
	if off != int64(len(b)) {
		return nil, damaged("%d bytes after the last part", int64(len(b))-off)
	}
	return parts, nil
}
