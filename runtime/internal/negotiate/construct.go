package negotiate

import (
	"fmt"
	"slices"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

func deviceName(d int32) string {
	if d == wire.CPU {
		return "CPU"
	}
	return "GPU"
}

func errorResponse(name string, format string, args ...any) wire.Response {
	return wire.Response{Type: wire.Error, Names: []string{name}, Error: fmt.Sprintf(format, args...)}
}

// construct validates the requests for one ready name (Horovod's
// Controller::ConstructResponse: first failing check wins) and builds its
// response.
//
// Requests are compared in rank order, so the texts are the same whatever
// order the ranks' requests arrived in.
func (c *Coordinator) construct(name string, reqs []wire.Request) wire.Response {
	slices.SortFunc(reqs, func(a, b wire.Request) int { return int(a.Rank) - int(b.Rank) })
	if e, bad := checkAgreement(name, reqs); bad {
		return e
	}
	if e, bad := c.checkShapes(name, reqs); bad {
		return e
	}
	return c.respond(name, reqs)
}

// checkAgreement checks the requests' element type, operation, shape,
// scaling and reduction against rank 0's (reqs is sorted by rank), in
// Horovod's order; bad reports a mismatch, e its error response.
func checkAgreement(name string, reqs []wire.Request) (e wire.Response, bad bool) {
	first := &reqs[0]
	for i := 1; i < len(reqs); i++ {
		if reqs[i].DType != first.DType {
			return errorResponse(name, "Mismatched data types: One rank had type %v, but another rank had type %v.",
				first.DType, reqs[i].DType), true
		}
	}
	for i := 1; i < len(reqs); i++ {
		if reqs[i].Type != first.Type {
			return errorResponse(name, "Mismatched operations: One rank did an %v, but another rank did an %v.",
				first.Type, reqs[i].Type), true
		}
	}
	typ := first.Type
	switch typ {
	case wire.Allreduce, wire.Adasum, wire.Broadcast, wire.Reducescatter:
		for i := 1; i < len(reqs); i++ {
			if !slices.Equal(reqs[i].Shape, first.Shape) {
				return errorResponse(name, "Mismatched %v tensor shapes: One rank sent a tensor of shape %s, but another rank sent a tensor of shape %s.",
					typ, wire.FormatShape(first.Shape), wire.FormatShape(reqs[i].Shape)), true
			}
		}
	}
	switch typ {
	case wire.Allreduce, wire.Adasum, wire.Reducescatter:
		for i := 1; i < len(reqs); i++ {
			if reqs[i].Prescale != first.Prescale || reqs[i].Postscale != first.Postscale {
				return errorResponse(name, "Mismatched prescale and/or postscale factors: One rank sent factors (%v, %v), but another rank sent factors (%v, %v).",
					first.Prescale, first.Postscale, reqs[i].Prescale, reqs[i].Postscale), true
			}
		}
	}
	if typ == wire.Allreduce {
		for i := 1; i < len(reqs); i++ {
			if reqs[i].Op != first.Op {
				return errorResponse(name, "Mismatched reduction operation: One rank sent reduction op %d, but another rank sent reduction op %d.",
					first.Op, reqs[i].Op), true
			}
		}
	}
	return wire.Response{}, false
}

// checkShapes checks what the operation allows (no gather, alltoall,
// reducescatter or broadcast while a rank is joined, no rank-zero tensors
// where rows are split), that the ranks' shapes fit together, the root and
// the device selection; bad reports a mismatch, e its error response.
func (c *Coordinator) checkShapes(name string, reqs []wire.Request) (e wire.Response, bad bool) {
	first := &reqs[0]
	typ := first.Type
	joinActive := c.joinedN > 0
	switch typ {
	case wire.Allgather:
		if joinActive {
			return errorResponse(name, "Allgather is not supported with Join at this time. Specify sparse_to_dense=True if using DistributedOptimizer"), true
		}
	case wire.Alltoall:
		if joinActive {
			return errorResponse(name, "Alltoall is not supported with Join at this time."), true
		}
	}
	switch typ {
	case wire.Allgather, wire.Alltoall, wire.Reducescatter:
		for i := range reqs {
			if len(reqs[i].Shape) == 0 {
				return errorResponse(name, "Process-set rank zero tried to %v a rank-zero tensor.", typ), true
			}
		}
	}
	if typ == wire.Allgather || typ == wire.Alltoall {
		for i := 1; i < len(reqs); i++ {
			if len(reqs[i].Shape) != len(first.Shape) {
				return errorResponse(name, "Mismatched %v tensor shapes: One rank sent a tensor of rank %d, but another rank sent a tensor of rank %d.",
					typ, len(first.Shape), len(reqs[i].Shape)), true
			}
		}
		for i := 1; i < len(reqs); i++ {
			for d := 1; d < len(first.Shape); d++ {
				if reqs[i].Shape[d] != first.Shape[d] {
					return errorResponse(name, "Mismatched %v tensor shapes: One rank sent a tensor with dimension %d equal to %d, but another rank sent a tensor with dimension %d equal to %d.",
						typ, d, first.Shape[d], d, reqs[i].Shape[d]), true
				}
			}
		}
	}
	if typ == wire.Reducescatter && joinActive {
		return errorResponse(name, "Reducescatter is not supported with Join at this time."), true
	}
	if typ == wire.Broadcast {
		if joinActive {
			return errorResponse(name, "Broadcast is not supported with Join at this time."), true
		}
		for i := 1; i < len(reqs); i++ {
			if reqs[i].Root != first.Root {
				return errorResponse(name, "Mismatched %v root ranks: One rank specified root rank %d, but another rank specified root rank %d.",
					typ, first.Root, reqs[i].Root), true
			}
		}
	}
	for i := 1; i < len(reqs); i++ {
		if (reqs[i].Device == wire.CPU) != (first.Device == wire.CPU) {
			return errorResponse(name, "Mismatched %v CPU/GPU device selection: One rank specified device %s, but another rank specified device %s.",
				typ, deviceName(first.Device), deviceName(reqs[i].Device)), true
		}
	}
	return wire.Response{}, false
}

// respond builds the response to requests that agree.
func (c *Coordinator) respond(name string, reqs []wire.Request) wire.Response {
	first := &reqs[0]
	typ := first.Type
	resp := wire.Response{
		Type:      wire.ResponseType(typ),
		Names:     []string{name},
		DType:     first.DType,
		Prescale:  first.Prescale,
		Postscale: first.Postscale,
		Op:        first.Op,
		Devices:   make([]int32, c.size),
	}
	for r := range resp.Devices {
		resp.Devices[r] = first.Device
	}
	for i := range reqs {
		resp.Devices[reqs[i].Rank] = reqs[i].Device
	}
	switch typ {
	case wire.Allreduce, wire.Adasum, wire.Reducescatter:
		resp.Sizes = []int64{wire.NumElements(first.Shape)}
		resp.Shapes = [][]int64{slices.Clone(first.Shape)}
	case wire.Allgather:
		resp.Sizes = make([]int64, c.size)
		for i := range reqs {
			resp.Sizes[reqs[i].Rank] = reqs[i].Shape[0]
		}
		shape := slices.Clone(first.Shape)
		shape[0] = resp.Sizes[0]
		resp.Shapes = [][]int64{shape}
	case wire.Broadcast, wire.Alltoall:
		resp.Shapes = [][]int64{slices.Clone(first.Shape)}
	}
	return resp
}
