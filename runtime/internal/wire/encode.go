package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/gohorovod/gohorovod/tensor"
)

// ErrTruncated is returned (wrapped) when the input ends inside a message.
var ErrTruncated = errors.New("wire: truncated message")

// maxDims bounds the rank of a tensor shape accepted by the decoder.
const maxDims = 64

// AppendRequestList appends the encoding of l to dst and returns the result.
func AppendRequestList(dst []byte, l *RequestList) []byte {
	dst = appendBool(dst, l.Shutdown)
	dst = binary.AppendUvarint(dst, uint64(len(l.Requests)))
	for i := range l.Requests {
		dst = appendRequest(dst, &l.Requests[i])
	}
	return dst
}

func appendRequest(dst []byte, r *Request) []byte {
	dst = binary.AppendVarint(dst, int64(r.Rank))
	dst = append(dst, byte(r.Type), byte(r.DType), byte(r.Op))
	dst = appendString(dst, r.Name)
	dst = binary.AppendVarint(dst, int64(r.Root))
	dst = binary.AppendVarint(dst, int64(r.Device))
	dst = appendInts(dst, r.Shape)
	dst = appendFloat(dst, r.Prescale)
	return appendFloat(dst, r.Postscale)
}

// AppendResponseList appends the encoding of l to dst and returns the result.
func AppendResponseList(dst []byte, l *ResponseList) []byte {
	dst = appendBool(dst, l.Shutdown)
	dst = binary.AppendUvarint(dst, uint64(len(l.Responses)))
	for i := range l.Responses {
		dst = appendResponse(dst, &l.Responses[i])
	}
	return dst
}

func appendResponse(dst []byte, r *Response) []byte {
	dst = append(dst, byte(r.Type), byte(r.DType), byte(r.Op))
	dst = binary.AppendUvarint(dst, uint64(len(r.Names)))
	for _, n := range r.Names {
		dst = appendString(dst, n)
	}
	dst = appendString(dst, r.Error)
	dst = binary.AppendUvarint(dst, uint64(len(r.Devices)))
	for _, d := range r.Devices {
		dst = binary.AppendVarint(dst, int64(d))
	}
	dst = appendInts(dst, r.Sizes)
	dst = binary.AppendUvarint(dst, uint64(len(r.Shapes)))
	for _, s := range r.Shapes {
		dst = appendInts(dst, s)
	}
	dst = appendFloat(dst, r.Prescale)
	dst = appendFloat(dst, r.Postscale)
	return binary.AppendVarint(dst, int64(r.LastJoinedRank))
}

func appendBool(dst []byte, b bool) []byte {
	if b {
		return append(dst, 1)
	}
	return append(dst, 0)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendInts(dst []byte, v []int64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	for _, x := range v {
		dst = binary.AppendVarint(dst, x)
	}
	return dst
}

func appendFloat(dst []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(f))
}

// decoder reads from a byte slice, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: reading %s", ErrTruncated, what)
	}
}

func (d *decoder) byte1(what string) byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail(what)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int32v(what string) int32 {
	v := d.varint(what)
	if v < math.MinInt32 || v > math.MaxInt32 {
		if d.err == nil {
			d.err = fmt.Errorf("wire: %s %d out of range", what, v)
		}
		return 0
	}
	return int32(v)
}

// count reads a length and checks that at least minBytes per item remain.
func (d *decoder) count(what string, minBytes int) int {
	v := d.uvarint(what)
	if d.err != nil {
		return 0
	}
	if v > uint64(len(d.b)/minBytes) {
		d.fail(what)
		return 0
	}
	return int(v)
}

func (d *decoder) str(what string) string {
	n := d.count(what, 1)
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) ints(what string, limit int) []int64 {
	n := d.count(what, 1)
	if d.err != nil || n == 0 {
		return nil
	}
	if limit > 0 && n > limit {
		d.err = fmt.Errorf("wire: %s has %d entries, more than %d", what, n, limit)
		return nil
	}
	v := make([]int64, n)
	for i := range v {
		v[i] = d.varint(what)
	}
	return v
}

func (d *decoder) float(what string) float64 {
	if d.err != nil || len(d.b) < 8 {
		d.fail(what)
		return 0
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return f
}

func (d *decoder) boolean(what string) bool {
	switch c := d.byte1(what); c {
	case 0:
		return false
	case 1:
		return true
	default:
		if d.err == nil {
			d.err = fmt.Errorf("wire: %s: bad boolean %d", what, c)
		}
		return false
	}
}

func (d *decoder) finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("wire: %d trailing bytes", len(d.b))
	}
	return d.err
}

// DecodeRequestList decodes a RequestList encoded by AppendRequestList.
func DecodeRequestList(b []byte) (RequestList, error) {
	d := decoder{b: b}
	var l RequestList
	l.Shutdown = d.boolean("shutdown")
	n := d.count("request count", 22)
	if n > 0 {
		l.Requests = make([]Request, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		r := &l.Requests[i]
		r.Rank = d.int32v("rank")
		r.Type = RequestType(d.byte1("type"))
		r.DType = tensor.DType(d.byte1("dtype"))
		r.Op = ReduceOp(d.byte1("reduce op"))
		r.Name = d.str("name")
		r.Root = d.int32v("root")
		r.Device = d.int32v("device")
		r.Shape = d.ints("shape", maxDims)
		r.Prescale = d.float("prescale")
		r.Postscale = d.float("postscale")
		if d.err == nil && !r.Type.Valid() {
			d.err = fmt.Errorf("wire: request %q: bad type %d", r.Name, r.Type)
		}
	}
	if err := d.finish(); err != nil {
		return RequestList{}, err
	}
	return l, nil
}

// DecodeResponseList decodes a ResponseList encoded by AppendResponseList.
func DecodeResponseList(b []byte) (ResponseList, error) {
	d := decoder{b: b}
	var l ResponseList
	l.Shutdown = d.boolean("shutdown")
	n := d.count("response count", 24)
	if n > 0 {
		l.Responses = make([]Response, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		r := &l.Responses[i]
		r.Type = ResponseType(d.byte1("type"))
		r.DType = tensor.DType(d.byte1("dtype"))
		r.Op = ReduceOp(d.byte1("reduce op"))
		if k := d.count("name count", 1); k > 0 {
			r.Names = make([]string, k)
			for j := range r.Names {
				r.Names[j] = d.str("name")
			}
		}
		r.Error = d.str("error")
		if k := d.count("device count", 1); k > 0 {
			r.Devices = make([]int32, k)
			for j := range r.Devices {
				r.Devices[j] = d.int32v("device")
			}
		}
		r.Sizes = d.ints("sizes", 0)
		if k := d.count("shape count", 1); k > 0 {
			r.Shapes = make([][]int64, k)
			for j := range r.Shapes {
				r.Shapes[j] = d.ints("shape", maxDims)
			}
		}
		r.Prescale = d.float("prescale")
		r.Postscale = d.float("postscale")
		r.LastJoinedRank = d.int32v("last joined rank")
		if d.err == nil && !r.Type.Valid() {
			d.err = fmt.Errorf("wire: response: bad type %d", r.Type)
		}
	}
	if err := d.finish(); err != nil {
		return ResponseList{}, err
	}
	return l, nil
}
