package wire

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Liveness is what rank 0 broadcasts at Init for the heartbeat channel:
// the job's heartbeat timeout (zero: the check is off, and the rest is
// empty), a fresh key that every heartbeat connection proves, and the
// addresses on which rank 0 listens.
type Liveness struct {
	Timeout time.Duration
	Key     []byte
	Addrs   []string
	Host    string // rank 0's host, named if rank 0 itself freezes
}

// AppendLiveness appends the encoding of l to dst.
func AppendLiveness(dst []byte, l Liveness) []byte {
	dst = binary.AppendVarint(dst, int64(l.Timeout))
	dst = binary.AppendUvarint(dst, uint64(len(l.Key)))
	dst = append(dst, l.Key...)
	dst = binary.AppendUvarint(dst, uint64(len(l.Addrs)))
	for _, a := range l.Addrs {
		dst = binary.AppendUvarint(dst, uint64(len(a)))
		dst = append(dst, a...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(l.Host)))
	return append(dst, l.Host...)
}

// DecodeLiveness decodes what AppendLiveness encoded.
func DecodeLiveness(b []byte) (Liveness, error) {
	d := decoder{b: b}
	var l Liveness
	l.Timeout = time.Duration(d.varint("heartbeat timeout"))
	if k := d.count("key length", 1); k > 0 && d.err == nil {
		l.Key = append([]byte(nil), d.b[:k]...)
		d.b = d.b[k:]
	}
	n := d.count("address count", 1)
	for i := 0; i < n && d.err == nil; i++ {
		l.Addrs = append(l.Addrs, d.str("address"))
	}
	l.Host = d.str("host")
	if err := d.finish(); err != nil {
		return Liveness{}, err
	}
	if l.Timeout < 0 {
		return Liveness{}, fmt.Errorf("wire: negative heartbeat timeout %v", l.Timeout)
	}
	return l, nil
}
