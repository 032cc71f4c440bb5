package wire

import (
	"fmt"

	"github.com/gohorovod/gohorovod/tensor"
)

// RequestType is the kind of collective a request asks for. The values are
// Horovod's, so that logs and traces read the same.
type RequestType uint8

// The request types.
const (
	Allreduce RequestType = iota
	Allgather
	Broadcast
	Join
	Adasum
	Alltoall
	Barrier
	Reducescatter
	numRequestTypes
)

var requestTypeNames = [...]string{"ALLREDUCE", "ALLGATHER", "BROADCAST", "JOIN", "ADASUM", "ALLTOALL", "BARRIER", "REDUCESCATTER"}

// Valid reports whether t is a declared request type.
func (t RequestType) Valid() bool { return t < numRequestTypes }

// String returns Horovod's upper-case name of the operation ("ALLREDUCE").
func (t RequestType) String() string {
	if t < numRequestTypes {
		return requestTypeNames[t]
	}
	return fmt.Sprintf("REQUEST_TYPE_%d", uint8(t))
}

// ResponseType is the kind of operation a response tells ranks to perform:
// one of the request types, or Error.
type ResponseType uint8

// Error is the response type that carries a negotiation error instead of an
// operation. The other response types share the request types' values.
const Error ResponseType = 8

// String returns Horovod's upper-case name ("ALLREDUCE", "ERROR").
func (t ResponseType) String() string {
	if t == Error {
		return "ERROR"
	}
	return RequestType(t).String()
}

// Valid reports whether t is a declared response type.
func (t ResponseType) Valid() bool { return t == Error || RequestType(t).Valid() }

// ReduceOp is the reduction a collective applies: tensor.ReduceOp, whose
// first six values carry Horovod's numbering (which its mismatch error
// prints).
type ReduceOp = tensor.ReduceOp

// The reductions of the public API.
const (
	Average  = tensor.Average
	Sum      = tensor.Sum
	AdasumOp = tensor.Adasum
	Min      = tensor.Min
	Max      = tensor.Max
	Product  = tensor.Product
)

// PublicOp reports whether op is a reduction of the public API (one of
// the six above; the bitwise ones are the runtime's own).
func PublicOp(op ReduceOp) bool { return op.Valid() && op <= Product }

// CPU is the Device value of a request for host memory; non-negative values
// are GPU indices.
const CPU int32 = -1

// Request is one rank's submission of one named operation.
type Request struct {
	Rank      int32        // the submitting rank
	Type      RequestType  // the collective
	DType     tensor.DType // element type
	Name      string       // the tensor name, unique among this rank's pending requests
	Root      int32        // root rank of a broadcast
	Device    int32        // CPU (-1) or a GPU index
	Shape     []int64      // the tensor's shape
	Prescale  float64      // factor applied before the reduction
	Postscale float64      // factor applied after the reduction
	Op        ReduceOp     // the reduction of an allreduce or reducescatter
}

// RequestList is what one rank sends to the coordinator in one cycle.
type RequestList struct {
	Requests []Request
	Shutdown bool // this rank asks every rank to shut down
}

// Response tells every rank to perform one operation, possibly over several
// fused tensors, or reports an error for the named tensors.
type Response struct {
	Type  ResponseType
	Names []string // more than one: a fused operation
	Error string   // the message of an Error response
	// Devices holds the device of each rank's tensor.
	Devices []int32
	// Sizes depends on the type: for allreduce and adasum, the element
	// count of each tensor; for allgather, the first dimension of each
	// rank's tensor, for each tensor in turn (len(Names)*ranks entries).
	Sizes []int64
	// Shapes holds each tensor's agreed shape (for allgather, rank 0's).
	Shapes         [][]int64
	DType          tensor.DType
	Prescale       float64
	Postscale      float64
	LastJoinedRank int32 // the Join response: the last rank to join
	Op             ReduceOp
}

// ResponseList is the ordered list of operations every rank performs in one
// cycle.
type ResponseList struct {
	Responses []Response
	Shutdown  bool // every rank stops its loop after this list
}

// NumElements returns the number of elements of a shape.
func NumElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// FormatShape prints a shape the way Horovod's messages do: "[17, 17, 17]".
func FormatShape(shape []int64) string {
	b := make([]byte, 0, 4+6*len(shape))
	b = append(b, '[')
	for i, d := range shape {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = fmt.Appendf(b, "%d", d)
	}
	return string(append(b, ']'))
}

// PostscaleOver is the factor a reduction over size ranks applies after
// reducing: the response's postscale, divided by size for an Average.
func (r *Response) PostscaleOver(size int) float64 {
	post := r.Postscale
	if r.Op == Average {
		post /= float64(size)
	}
	return post
}

// IntShape converts a shape as it travels (int64 dimensions) into the
// tensor package's.
func IntShape(s []int64) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = int(d)
	}
	return out
}
