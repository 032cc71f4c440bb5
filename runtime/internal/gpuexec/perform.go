package gpuexec

import (
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/runtime/internal/gpupath"
	"github.com/gohorovod/gohorovod/runtime/internal/timeline"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// Setup runs once per executor, at the first GPU response, before the
// response's entries are taken: the ranks agree on the GPU capabilities
// they all have and, when all have NCCL, make the NCCL communicator (made
// reports it, for the timeline's INIT_NCCL). Every rank of the set calls
// it at the same response. An error stops the runtime.
func (x *Executor) Setup(h Host) (made bool, err error) {
	had := x.nc != nil
	err = x.setup(h, x.device())
	return !had && x.nc != nil, err
}

// Perform executes one response on GPU tensors (not Adasum, which the
// runtime refuses itself), after Setup: ents are the response's entries in
// order (a joined rank's zeros are host tensors); Perform sets their
// outputs and, for an alltoall, the received splits. On success every
// result is in place; on failure the device memory it allocated for
// results is freed again.
func (x *Executor) Perform(h Host, resp *wire.Response, ents []Entry) error {
	typ := wire.RequestType(resp.Type)
	dev := x.device()
	o := &gpuOp{x: x, h: h, ents: ents, dev: dev, dt: resp.DType, path: gpupath.Choose(x.caps, gpupath.Op{Type: typ, DType: resp.DType})}
	if dev == nil && o.path != gpupath.Staged {
		return fmt.Errorf("internal: %v on GPU tensors by %v on a rank without a GPU", typ, o.path)
	}
	if log := h.Log(); log.Debug().Enabled() {
		log.Debug().Str("op", typ.String()).Str("path", o.path.String()).Int("tensors", len(resp.Names)).
			Str("first", resp.Names[0]).Msg("GPU collective")
	}
	var err error
	switch typ {
	case wire.Allreduce:
		err = o.allreduce(resp)
	case wire.Allgather:
		err = o.allgather(&ents[0], resp)
	case wire.Broadcast:
		err = o.broadcast(&ents[0])
	case wire.Alltoall:
		err = o.alltoall(&ents[0])
	case wire.Reducescatter:
		err = o.reducescatter(&ents[0], resp)
	default:
		err = fmt.Errorf("internal: %v response on GPU tensors", resp.Type)
	}
	if err == nil && dev != nil {
		err = dev.Sync()
		if err == nil && x.nc != nil && o.path == gpupath.NCCL {
			err = x.nc.Err()
		}
	}
	x.settle(dev, err != nil)
	return err
}

func rowElems(shape []int64) int {
	n := 1
	for _, d := range shape[1:] {
		n *= int(d)
	}
	return n
}

// reducescatterRows is runtime.ReducescatterRows: the rows of dim0 rank
// keeps, the first dim0%size ranks one more.
func reducescatterRows(dim0, size, rank int) int {
	n := dim0 / size
	if rank < dim0%size {
		n++
	}
	return n
}

// gpuOp is one GPU collective being performed.
type gpuOp struct {
	x    *Executor
	h    Host
	ents []Entry
	dev  cuda.Device // nil on a rank without a GPU (a joined rank's zeros)
	path gpupath.Path
	dt   tensor.DType
}

// mark returns the time a phase ended: with a timeline, the device is
// synchronised first, so that the span covers the device work.
func (o *gpuOp) mark() (time.Time, error) {
	if o.h.Timeline() && o.dev != nil {
		if err := o.dev.Sync(); err != nil {
			return time.Time{}, err
		}
	}
	return time.Now(), nil
}

func devTensor(dev cuda.Device, dt tensor.DType, p uintptr, n int) *tensor.Tensor {
	return tensor.NewDevice(dt, tensor.Device{Kind: tensor.GPU, Index: dev.Ordinal()}, p, n)
}

// scaleOnHost multiplies n bytes of device memory at p by f through the
// staging buffer: the runtime has no device kernels of its own. The
// timeline draws it as SCALE_ON_HOST.
func (o *gpuOp) scaleOnHost(p uintptr, n int, f float64) (err error) {
	if f == 1 || n == 0 {
		return nil
	}
	start := time.Now()
	defer func() {
		if err == nil {
			o.h.Activity(timeline.ScaleOnHost, start, time.Now())
		}
	}()
	h, err := o.x.hostBuffer(o.dev, n)
	if err != nil {
		return err
	}
	if err := o.dev.CopyDtoH(h, p); err != nil {
		return err
	}
	if err := o.dev.Sync(); err != nil {
		return err
	}
	tensor.Scale(o.dt, h, f)
	if err := o.dev.CopyHtoD(p, h); err != nil {
		return err
	}
	return o.dev.Sync()
}

// allreduce reduces the entries of a (possibly fused) response. Several
// tensors are packed into the device fusion buffer (device-to-device
// copies on the stream), reduced there as one and unpacked; a single one
// is reduced in its output. A joined rank's zeros are host tensors, copied
// in from the host.
func (o *gpuOp) allreduce(resp *wire.Response) error {
	h, g, dev := o.h, o.x, o.dev
	start := time.Now()
	total := 0
	for _, e := range o.ents {
		total += e.In.NumBytes()
	}
	if dev == nil {
		return o.allreduceHost(resp, total)
	}
	for i := range o.ents {
		if e := &o.ents[i]; e.Out == nil {
			out, err := g.alloc(dev, e.In.DType(), e.In.Shape())
			if err != nil {
				return err
			}
			e.Out = out
		}
	}
	single := len(o.ents) == 1 && o.ents[0].In.Device().Kind == tensor.GPU
	buf, err := o.gatherIn(single, total)
	if err != nil {
		return err
	}
	t1, err := o.mark()
	if err != nil {
		return err
	}
	if !single {
		h.Activity(timeline.MemcpyInFusion, start, t1)
	}
	if err := o.reduce(resp, buf, total, t1); err != nil {
		return err
	}
	if single {
		return nil
	}
	t2 := time.Now()
	if err := o.scatterOut(buf); err != nil {
		return err
	}
	t3, err := o.mark()
	if err != nil {
		return err
	}
	h.Activity(timeline.MemcpyOutFusion, t2, t3)
	return nil
}

// gatherIn returns the device buffer the allreduce of total bytes runs in:
// a single GPU tensor's output, its input copied there, or else the fusion
// buffer with every input copied in (device tensors in one batch of
// copies, host tensors one by one).
func (o *gpuOp) gatherIn(single bool, total int) (uintptr, error) {
	g, dev := o.x, o.dev
	if single {
		e := &o.ents[0]
		buf := e.Out.DevicePtr()
		if e.Out != e.In {
			if err := dev.CopyDtoD(buf, e.In.DevicePtr(), total); err != nil {
				return 0, err
			}
		}
		return buf, nil
	}
	buf, err := g.fusionBuffer(dev, total, o.h.FusionThreshold())
	if err != nil {
		return 0, err
	}
	b := g.batch()
	off := uintptr(0)
	for _, e := range o.ents {
		n := e.In.NumBytes()
		if e.In.Device().Kind == tensor.GPU {
			b.add(buf+off, e.In.DevicePtr(), n)
		} else if err := dev.CopyHtoD(buf+off, e.In.Bytes()); err != nil {
			return 0, err
		}
		off += uintptr(n)
	}
	return buf, b.run(dev)
}

// scatterOut copies the reduced fusion buffer at buf back to the outputs.
func (o *gpuOp) scatterOut(buf uintptr) error {
	b := o.x.batch()
	off := uintptr(0)
	for _, e := range o.ents {
		n := e.Out.NumBytes()
		if e.Out.Device().Kind == tensor.GPU {
			b.add(e.Out.DevicePtr(), buf+off, n)
		} else if err := o.dev.CopyDtoH(e.Out.Bytes(), buf+off); err != nil {
			return err
		}
		off += uintptr(n)
	}
	return b.run(o.dev)
}

// reduce allreduces total bytes of device memory at buf along o's path,
// with the response's scale factors.
func (o *gpuOp) reduce(resp *wire.Response, buf uintptr, total int, start time.Time) error {
	hs, g, dev, dt := o.h, o.x, o.dev, o.dt
	op := resp.Op.Kernel()
	pre, post := resp.Prescale, resp.PostscaleOver(hs.Size())
	count := total / dt.Size()
	switch o.path {
	case gpupath.NCCL:
		avg := resp.Op == wire.Average && pre == 1 && resp.Postscale == 1 && g.backend.Average()
		if avg {
			post = 1
		}
		if err := o.scaleOnHost(buf, total, pre); err != nil {
			return err
		}
		t1 := time.Now()
		if err := g.nc.AllReduce(buf, count, dt, op, avg); err != nil {
			return err
		}
		t2, err := o.mark()
		if err != nil {
			return err
		}
		hs.Activity(timeline.NCCLAllreduce, t1, t2)
		return o.scaleOnHost(buf, total, post)
	case gpupath.CUDAAwareMPI:
		if err := o.scaleOnHost(buf, total, pre); err != nil {
			return err
		}
		// MPI does not know the device's stream: wait for the copies.
		if err := dev.Sync(); err != nil {
			return err
		}
		t1 := time.Now()
		if err := hs.Comm().Allreduce(devTensor(dev, dt, buf, count), op); err != nil {
			return err
		}
		hs.Activity(timeline.MPIAllreduce, t1, time.Now())
		return o.scaleOnHost(buf, total, post)
	}
	h, err := g.hostBuffer(dev, total)
	if err != nil {
		return err
	}
	// In pieces: the device copies the next pieces to the host while
	// this one is reduced, and the reduced ones back (Device.Stage). The
	// timeline draws the wait for the first piece as the copy in, the
	// pieces' reductions (and the waits between them) as the allreduce,
	// and the wait for the last copies back as the copy out.
	var t1 time.Time
	err = dev.Stage(buf, h, g.stagePiece(dt), func(b []byte) error {
		if t1.IsZero() {
			t1 = time.Now()
			hs.Activity(timeline.MemcpyInHost, start, t1)
		}
		tensor.Scale(dt, b, pre)
		if err := hs.ReduceBytes(b, dt, op); err != nil {
			return err
		}
		tensor.Scale(dt, b, post)
		return nil
	})
	if err != nil {
		return err
	}
	if t1.IsZero() { // nothing to stage
		t1 = time.Now()
		hs.Activity(timeline.MemcpyInHost, start, t1)
	}
	t2 := time.Now()
	hs.Activity(timeline.MPIAllreduce, t1, t2)
	t3, err := o.mark()
	if err != nil {
		return err
	}
	hs.Activity(timeline.MemcpyOutHost, t2, t3)
	return nil
}

// allreduceHost is a GPU allreduce on a rank without a GPU: a joined rank
// whose zeros are host tensors. It issues the same host collectives as the
// staged path.
func (o *gpuOp) allreduceHost(resp *wire.Response, total int) error {
	hs := o.h
	h, err := o.x.hostBuffer(nil, total)
	if err != nil {
		return err
	}
	off := 0
	for _, e := range o.ents {
		off += copy(h[off:], e.In.Bytes())
	}
	tensor.Scale(o.dt, h, resp.Prescale)
	if err := hs.ReduceBytes(h, o.dt, resp.Op.Kernel()); err != nil {
		return err
	}
	tensor.Scale(o.dt, h, resp.PostscaleOver(hs.Size()))
	off = 0
	for _, e := range o.ents {
		off += copy(e.Out.Bytes(), h[off:])
	}
	return nil
}

// span is n bytes of device memory at p.
type span struct {
	p uintptr
	n int
}

// staged runs a host collective on copies of device memory: ins are copied
// into the staging buffer, fn runs on host tensors over it (the timeline
// calls it act), and outs are copied back.
func (o *gpuOp) staged(act string, ins, outs []span, fn func(in, out []*tensor.Tensor) error) error {
	hs, dev := o.h, o.dev
	start := time.Now()
	total := 0
	for _, s := range ins {
		total += s.n
	}
	for _, s := range outs {
		total += s.n
	}
	h, err := o.x.hostBuffer(dev, total)
	if err != nil {
		return err
	}
	hin := make([]*tensor.Tensor, len(ins))
	hout := make([]*tensor.Tensor, len(outs))
	off := 0
	for i, s := range ins {
		b := h[off : off+s.n]
		off += s.n
		if err := dev.CopyDtoH(b, s.p); err != nil {
			return err
		}
		if hin[i], err = tensor.FromBytes(o.dt, b); err != nil {
			return err
		}
	}
	for i, s := range outs {
		b := h[off : off+s.n]
		off += s.n
		if hout[i], err = tensor.FromBytes(o.dt, b); err != nil {
			return err
		}
	}
	if err := dev.Sync(); err != nil {
		return err
	}
	t1 := time.Now()
	hs.Activity(timeline.MemcpyInHost, start, t1)
	if err := fn(hin, hout); err != nil {
		return err
	}
	t2 := time.Now()
	hs.Activity(act, t1, t2)
	for i, s := range outs {
		if err := dev.CopyHtoD(s.p, hout[i].Bytes()); err != nil {
			return err
		}
	}
	if err := dev.Sync(); err != nil {
		return err
	}
	hs.Activity(timeline.MemcpyOutHost, t2, time.Now())
	return nil
}

func (o *gpuOp) activity(nccl, mpi string, start time.Time) error {
	end, err := o.mark()
	if err != nil {
		return err
	}
	act := mpi
	if o.path == gpupath.NCCL {
		act = nccl
	}
	o.h.Activity(act, start, end)
	return nil
}

func (o *gpuOp) allgather(e *Entry, resp *wire.Response) error {
	h, g, dev := o.h, o.x, o.dev
	row := rowElems(e.Req.Shape)
	rows := 0
	counts := make([]int, h.Size())
	for r := 0; r < h.Size(); r++ {
		counts[r] = int(resp.Sizes[r]) * row
		rows += int(resp.Sizes[r])
	}
	shape := wire.IntShape(e.Req.Shape)
	shape[0] = rows
	out, err := g.alloc(dev, e.Req.DType, shape)
	if err != nil {
		return err
	}
	e.Out = out
	start := time.Now()
	switch o.path {
	case gpupath.NCCL:
		if err := g.nc.AllGatherV(e.In.DevicePtr(), out.DevicePtr(), counts, o.dt); err != nil {
			return err
		}
	case gpupath.CUDAAwareMPI:
		if err := dev.Sync(); err != nil {
			return err
		}
		if err := h.Comm().Allgatherv(e.In, out, counts); err != nil {
			return err
		}
	default:
		return o.staged(timeline.MPIAllgather, []span{{e.In.DevicePtr(), e.In.NumBytes()}}, []span{{out.DevicePtr(), out.NumBytes()}},
			func(in, outs []*tensor.Tensor) error { return h.Comm().Allgatherv(in[0], outs[0], counts) })
	}
	return o.activity(timeline.NCCLAllgather, timeline.MPIAllgather, start)
}

func (o *gpuOp) broadcast(e *Entry) error {
	h, g, dev := o.h, o.x, o.dev
	root := int(e.Req.Root)
	if e.Out == nil {
		out, err := g.alloc(dev, e.In.DType(), e.In.Shape())
		if err != nil {
			return err
		}
		e.Out = out
	}
	n := e.Out.NumBytes()
	if h.Rank() == root && e.Out != e.In {
		if err := dev.CopyDtoD(e.Out.DevicePtr(), e.In.DevicePtr(), n); err != nil {
			return err
		}
	}
	start := time.Now()
	switch o.path {
	case gpupath.NCCL:
		if err := g.nc.Broadcast(e.Out.DevicePtr(), e.Out.Len(), o.dt, root); err != nil {
			return err
		}
	case gpupath.CUDAAwareMPI:
		if err := dev.Sync(); err != nil {
			return err
		}
		if err := h.Comm().Bcast(e.Out, root); err != nil {
			return err
		}
	default:
		return o.stagedBcast(e.Out.DevicePtr(), n, root)
	}
	return o.activity(timeline.NCCLBcast, timeline.MPIBcast, start)
}

// stagedBcast broadcasts n bytes of device memory at p through the staging
// buffer: the root copies them out, every rank receives, the others copy
// them in.
func (o *gpuOp) stagedBcast(p uintptr, n, root int) error {
	hs, dev := o.h, o.dev
	start := time.Now()
	h, err := o.x.hostBuffer(dev, n)
	if err != nil {
		return err
	}
	if hs.Rank() == root {
		if err := dev.CopyDtoH(h, p); err != nil {
			return err
		}
		if err := dev.Sync(); err != nil {
			return err
		}
	}
	t1 := time.Now()
	hs.Activity(timeline.MemcpyInHost, start, t1)
	t, err := tensor.FromBytes(o.dt, h)
	if err != nil {
		return err
	}
	if err := hs.Comm().Bcast(t, root); err != nil {
		return err
	}
	t2 := time.Now()
	hs.Activity(timeline.MPIBcast, t1, t2)
	if hs.Rank() != root {
		if err := dev.CopyHtoD(p, h); err != nil {
			return err
		}
		if err := dev.Sync(); err != nil {
			return err
		}
	}
	hs.Activity(timeline.MemcpyOutHost, t2, time.Now())
	return nil
}

func (o *gpuOp) alltoall(e *Entry) error {
	h, g, dev := o.h, o.x, o.dev
	p, err := h.PlanAlltoall(e.Splits, e.Req.Shape)
	if err != nil {
		return err
	}
	recvSplits, sendCounts, recvCounts, sent := p.RecvSplits, p.SendCounts, p.RecvCounts, p.Sent
	out, err := g.alloc(dev, e.Req.DType, p.Shape)
	if err != nil {
		return err
	}
	e.Out = out
	send := e.In.Rows(0, sent)
	start := time.Now()
	switch o.path {
	case gpupath.NCCL:
		err = g.nc.AllToAllV(send.DevicePtr(), sendCounts, out.DevicePtr(), recvCounts, o.dt)
	case gpupath.CUDAAwareMPI:
		if err = dev.Sync(); err == nil {
			err = h.Comm().Alltoallv(send, sendCounts, out, recvCounts)
		}
	default:
		err = o.staged(timeline.MPIAlltoall, []span{{send.DevicePtr(), send.NumBytes()}}, []span{{out.DevicePtr(), out.NumBytes()}},
			func(in, outs []*tensor.Tensor) error {
				return h.Comm().Alltoallv(in[0], sendCounts, outs[0], recvCounts)
			})
	}
	if err != nil {
		return err
	}
	e.RecvSplits = recvSplits
	if o.path == gpupath.Staged {
		return nil
	}
	return o.activity(timeline.NCCLAlltoall, timeline.MPIAlltoall, start)
}

func (o *gpuOp) reducescatter(e *Entry, resp *wire.Response) error {
	h, g, dev := o.h, o.x, o.dev
	shape := resp.Shapes[0]
	row := rowElems(shape)
	counts := make([]int, h.Size())
	for r := 0; r < h.Size(); r++ {
		counts[r] = reducescatterRows(int(shape[0]), h.Size(), r) * row
	}
	if e.Out == nil {
		s := wire.IntShape(shape)
		s[0] = reducescatterRows(s[0], h.Size(), h.Rank())
		out, err := g.alloc(dev, e.Req.DType, s)
		if err != nil {
			return err
		}
		e.Out = out
	}
	pre, post := resp.Prescale, resp.Postscale
	if o.path == gpupath.Staged {
		return o.staged(timeline.MPIReduceScat, []span{{e.In.DevicePtr(), e.In.NumBytes()}}, []span{{e.Out.DevicePtr(), e.Out.NumBytes()}},
			func(in, outs []*tensor.Tensor) error {
				tensor.ScaleTensor(in[0], pre)
				if err := h.Comm().ReduceScatter(in[0], outs[0], counts, tensor.Sum); err != nil {
					return err
				}
				tensor.ScaleTensor(outs[0], post)
				return nil
			})
	}
	send := e.In.DevicePtr()
	n := e.In.NumBytes()
	if pre != 1 {
		// Scale a copy: the input is not the caller's to change.
		buf, err := g.fusionBuffer(dev, n, h.FusionThreshold())
		if err != nil {
			return err
		}
		if err := dev.CopyDtoD(buf, send, n); err != nil {
			return err
		}
		if err := o.scaleOnHost(buf, n, pre); err != nil {
			return err
		}
		send = buf
	}
	start := time.Now()
	var err error
	if o.path == gpupath.NCCL {
		err = g.nc.ReduceScatterV(send, e.Out.DevicePtr(), counts, o.dt, tensor.Sum)
	} else if err = dev.Sync(); err == nil {
		err = h.Comm().ReduceScatter(devTensor(dev, o.dt, send, n/o.dt.Size()), e.Out, counts, tensor.Sum)
	}
	if err != nil {
		return err
	}
	if err := o.activity(timeline.NCCLReduceScat, timeline.MPIReduceScat, start); err != nil {
		return err
	}
	return o.scaleOnHost(e.Out.DevicePtr(), e.Out.NumBytes(), post)
}
