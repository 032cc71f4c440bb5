package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// This file holds the control messages: what the ranks exchange outside a
// cycle's negotiation (at Init, when they stop, while autotuning, when a
// process set is added or removed). Each has an Append function and a
// Decode function that rejects, never panics on, any other bytes.

// FarewellKind says why a rank stops.
type FarewellKind byte

// The kinds of farewell.
const (
	FarewellNone     FarewellKind = iota // it stops because another rank asked
	FarewellShutdown                     // Shutdown was called on it
	FarewellStall                        // its stall inspector stopped the job
	FarewellFailed                       // its loop failed; Text is the error
)

// Farewell is the record each rank gives every other when the ranks have
// agreed to stop: why it stops and, for a failure or a stall, the text.
type Farewell struct {
	Kind FarewellKind
	Text string
}

// AppendFarewell appends the encoding of f to dst: the kind byte, then the
// text's bytes (the rest of the message).
func AppendFarewell(dst []byte, f Farewell) []byte {
	return append(append(dst, byte(f.Kind)), f.Text...)
}

// DecodeFarewell decodes a record encoded by AppendFarewell.
func DecodeFarewell(b []byte) (Farewell, error) {
	if len(b) == 0 {
		return Farewell{}, fmt.Errorf("%w: reading farewell kind", ErrTruncated)
	}
	k := FarewellKind(b[0])
	if k > FarewellFailed {
		return Farewell{}, fmt.Errorf("wire: farewell: bad kind %d", k)
	}
	return Farewell{Kind: k, Text: string(b[1:])}, nil
}

// SetsInit is what each process says when Init registers the static
// process sets: a problem it found alone (empty when none), how many sets
// it was given, and its rank in each set made from a communicator, in the
// order given (-1 where it is not a member).
type SetsInit struct {
	Problem   string
	Count     int
	CommRanks []int
}

// maxSets bounds the counts accepted by the process set decoders.
const maxSets = 1 << 20

// AppendSetsInit appends the encoding of s to dst.
func AppendSetsInit(dst []byte, s *SetsInit) []byte {
	dst = appendString(dst, s.Problem)
	dst = binary.AppendVarint(dst, int64(s.Count))
	return appendIntList(dst, s.CommRanks)
}

// DecodeSetsInit decodes a message encoded by AppendSetsInit.
func DecodeSetsInit(b []byte) (SetsInit, error) {
	d := decoder{b: b}
	var s SetsInit
	s.Problem = d.str("problem")
	s.Count = d.intv("set count", 0, maxSets)
	s.CommRanks = d.intList("communicator ranks", -1, math.MaxInt32)
	if err := d.finish(); err != nil {
		return SetsInit{}, err
	}
	return s, nil
}

// SetRanks is the global ranks of each static process set, in the order
// given to Init: every process must send the same.
type SetRanks struct {
	Sets [][]int
}

// AppendSetRanks appends the encoding of s to dst.
func AppendSetRanks(dst []byte, s *SetRanks) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s.Sets)))
	for _, rs := range s.Sets {
		dst = appendIntList(dst, rs)
	}
	return dst
}

// DecodeSetRanks decodes a message encoded by AppendSetRanks.
func DecodeSetRanks(b []byte) (SetRanks, error) {
	d := decoder{b: b}
	var s SetRanks
	if n := d.count("set count", 1); n > 0 {
		s.Sets = make([][]int, n)
		for i := range s.Sets {
			s.Sets[i] = d.intList("set ranks", 0, math.MaxInt32)
		}
	}
	if err := d.finish(); err != nil {
		return SetRanks{}, err
	}
	return s, nil
}

// SetOp is a dynamic process set registration: the addition of a set of
// the given global ranks, or the removal of the set with the given id.
// Every process submits one, and they must all be the same.
type SetOp struct {
	Add   bool
	Ranks []int // Add: the set's ranks
	ID    int   // removal: the set's id
}

// AppendSetOp appends the encoding of o to dst.
func AppendSetOp(dst []byte, o *SetOp) []byte {
	if o.Add {
		return appendIntList(append(dst, 'a'), o.Ranks)
	}
	return binary.AppendVarint(append(dst, 'r'), int64(o.ID))
}

// DecodeSetOp decodes a message encoded by AppendSetOp.
func DecodeSetOp(b []byte) (SetOp, error) {
	d := decoder{b: b}
	var o SetOp
	switch c := d.byte1("registration kind"); c {
	case 'a':
		o.Add = true
		o.Ranks = d.intList("set ranks", 0, math.MaxInt32)
	case 'r':
		o.ID = d.intv("set id", 0, math.MaxInt32)
	default:
		if d.err == nil {
			d.err = fmt.Errorf("wire: process set registration: bad kind %d", c)
		}
	}
	if err := d.finish(); err != nil {
		return SetOp{}, err
	}
	return o, nil
}

// TuningSize is the size of an encoded Tuning: every rank receives rank
// 0's setting into a buffer of this size.
const TuningSize = 4*8 + 2

// Tuning is one autotuning setting, which rank 0 broadcasts at the start
// of every global cycle while tuning, and every rank applies. Done says
// that tuning has finished: no rank broadcasts again.
type Tuning struct {
	FusionBytes           int64
	CycleTimeNs           int64
	HierarchicalAllreduce bool
	HierarchicalAllgather bool
	ChunkBytes            int64
	FusionChunkBytes      int64
	CacheEnabled          bool
	Done                  bool
}

// AppendTuning appends the TuningSize bytes of t's encoding to dst: four
// little-endian 64-bit numbers (fusion bytes, cycle time, chunk bytes,
// fusion chunk bytes), then a byte of flags (hierarchical allreduce,
// hierarchical allgather, cache enabled), then the done byte.
func AppendTuning(dst []byte, t *Tuning) []byte {
	for _, v := range [...]int64{t.FusionBytes, t.CycleTimeNs, t.ChunkBytes, t.FusionChunkBytes} {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(v))
	}
	var flags byte
	for i, b := range [...]bool{t.HierarchicalAllreduce, t.HierarchicalAllgather, t.CacheEnabled} {
		if b {
			flags |= 1 << i
		}
	}
	dst = append(dst, flags)
	return appendBool(dst, t.Done)
}

// DecodeTuning decodes a setting encoded by AppendTuning.
func DecodeTuning(b []byte) (Tuning, error) {
	if len(b) != TuningSize {
		return Tuning{}, fmt.Errorf("wire: autotune setting of %d bytes, want %d", len(b), TuningSize)
	}
	var v [4]int64
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	flags := b[32]
	if flags&^7 != 0 {
		return Tuning{}, fmt.Errorf("wire: autotune setting: bad flags %#x", flags)
	}
	d := decoder{b: b[33:]}
	done := d.boolean("done")
	if err := d.finish(); err != nil {
		return Tuning{}, err
	}
	return Tuning{FusionBytes: v[0], CycleTimeNs: v[1], ChunkBytes: v[2], FusionChunkBytes: v[3],
		HierarchicalAllreduce: flags&1 != 0, HierarchicalAllgather: flags&2 != 0, CacheEnabled: flags&4 != 0,
		Done: done}, nil
}

// Setting is one knob that every rank must hold alike, by the name the
// user sets it with and its value as written.
type Setting struct {
	Name, Value string
}

// settingsVersion is the first byte of an encoding of settings, so that a
// future layout is recognised rather than misread.
const settingsVersion = 1

// ErrBadSettings is wrapped by DecodeSettings's errors.
var ErrBadSettings = errors.New("malformed settings")

// AppendSettings appends the encoding of s to dst and returns the extended
// slice: a version byte, the number of settings, then each name and value,
// every count and length an unsigned varint.
func AppendSettings(dst []byte, s []Setting) []byte {
	dst = append(dst, settingsVersion)
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	for _, x := range s {
		dst = appendString(dst, x.Name)
		dst = appendString(dst, x.Value)
	}
	return dst
}

// DecodeSettings reads an encoding written by AppendSettings. It rejects,
// wrapping ErrBadSettings, an unknown version, truncated or trailing bytes,
// an empty name and a name given twice.
func DecodeSettings(b []byte) ([]Setting, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadSettings, fmt.Sprintf(format, a...))
	}
	if len(b) == 0 {
		return nil, bad("empty")
	}
	if b[0] != settingsVersion {
		return nil, bad("version %d, want %d", b[0], settingsVersion)
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, bad("bad count")
	}
	b = b[k:]
	if n > uint64(len(b))/3 { // a setting takes at least three bytes
		return nil, bad("%d settings in %d bytes", n, len(b))
	}
	str := func(what string) (string, error) {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return "", bad("truncated %s", what)
		}
		s := string(b[k : k+int(l)])
		b = b[k+int(l):]
		return s, nil
	}
	out := make([]Setting, 0, n)
	seen := make(map[string]bool, n)
	for range n {
		name, err := str("name")
		if err != nil {
			return nil, err
		}
		if name == "" {
			return nil, bad("empty name")
		}
		if seen[name] {
			return nil, bad("%s given twice", name)
		}
		seen[name] = true
		value, err := str("value of " + name)
		if err != nil {
			return nil, err
		}
		out = append(out, Setting{Name: name, Value: value})
	}
	if len(b) != 0 {
		return nil, bad("%d trailing bytes", len(b))
	}
	return out, nil
}

// appendIntList appends a count and each value, every one a varint.
func appendIntList(dst []byte, vs []int) []byte {
	dst = binary.AppendVarint(dst, int64(len(vs)))
	for _, v := range vs {
		dst = binary.AppendVarint(dst, int64(v))
	}
	return dst
}

// intv reads a varint and checks that it lies in [lo, hi].
func (d *decoder) intv(what string, lo, hi int64) int {
	v := d.varint(what)
	if d.err == nil && (v < lo || v > hi) {
		d.err = fmt.Errorf("wire: %s %d out of range", what, v)
	}
	if d.err != nil {
		return 0
	}
	return int(v)
}

// intList reads a list written by appendIntList, each value in [lo, hi].
func (d *decoder) intList(what string, lo, hi int64) []int {
	n := d.varint(what)
	if d.err != nil {
		return nil
	}
	if n < 0 || n > int64(len(d.b)) {
		d.fail(what)
		return nil
	}
	if n == 0 {
		return nil
	}
	v := make([]int, n)
	for i := range v {
		v[i] = d.intv(what, lo, hi)
	}
	if d.err != nil {
		return nil
	}
	return v
}
