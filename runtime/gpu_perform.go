package runtime

import (
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/runtime/internal/gpupath"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// adasumGPUText is delivered to Adasum requests on GPU tensors.
const adasumGPUText = "Adasum on GPU tensors is not supported by this runtime; reduce a host copy"

// gpuOp is one GPU collective being performed.
type gpuOp struct {
	l    *loop
	dev  cuda.Device // nil on a rank without a GPU (a joined rank's zeros)
	path gpupath.Path
	dt   tensor.DType
}

// mark returns the time a phase ended: with a timeline, the device is
// synchronised first, so that the span covers the device work.
func (o *gpuOp) mark() (time.Time, error) {
	if o.l.tl != nil && o.dev != nil {
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
// staging buffer: the runtime has no device kernels of its own.
func (o *gpuOp) scaleOnHost(p uintptr, n int, f float64) error {
	if f == 1 || n == 0 {
		return nil
	}
	g := o.l.r.gpu
	h, err := g.hostBuffer(o.dev, n)
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

// performGPU executes one response on GPU tensors. Like perform, it returns
// an error only when the runtime must stop.
func (l *loop) performGPU(resp *wire.Response) error {
	g := l.r.gpu
	typ := wire.RequestType(resp.Type)
	if typ == wire.Adasum {
		if err := l.entries(resp); err != nil {
			return err
		}
		for _, e := range l.ents {
			if e.h != nil {
				e.h.fail(&OpError{Name: e.req.Name, Message: adasumGPUText})
			}
		}
		return nil
	}
	dev := g.device()
	if err := l.gpuSetup(dev); err != nil {
		return err
	}
	o := &gpuOp{l: l, dev: dev, dt: resp.DType, path: gpupath.Choose(g.caps, gpupath.Op{Type: typ, DType: resp.DType})}
	if dev == nil && o.path != gpupath.Staged {
		return fmt.Errorf("internal: %v on GPU tensors by %v on a rank without a GPU", typ, o.path)
	}
	if l.log.Debug().Enabled() {
		l.log.Debug().Str("op", typ.String()).Str("path", o.path.String()).Int("tensors", len(resp.Names)).
			Str("first", resp.Names[0]).Msg("GPU collective")
	}
	var err error
	if typ == wire.Allreduce {
		if err = l.entries(resp); err != nil {
			return err
		}
		err = o.allreduce(resp)
	} else {
		e := l.r.q.take(resp.Names[0])
		if e == nil {
			return fmt.Errorf("internal: response %v for %q, which this rank did not submit", resp.Type, resp.Names[0])
		}
		l.ents = append(l.ents[:0], e)
		start := time.Now()
		l.tlStart(l.ents, resp.Type.String(), start)
		switch typ {
		case wire.Allgather:
			err = o.allgather(e, resp)
		case wire.Broadcast:
			err = o.broadcast(e)
		case wire.Alltoall:
			err = o.alltoall(e)
		case wire.Reducescatter:
			err = o.reducescatter(e, resp)
		default:
			err = fmt.Errorf("internal: %v response on GPU tensors", resp.Type)
		}
	}
	if err == nil && dev != nil {
		err = dev.Sync()
		if err == nil && g.nc != nil && o.path == gpupath.NCCL {
			err = g.nc.Err()
		}
	}
	g.settle(dev, err != nil)
	l.tlEnd(l.ents, time.Now())
	if err != nil {
		return collectiveErr(l.ents, err)
	}
	finish(l.ents)
	return nil
}

// allreduce reduces the entries of a (possibly fused) response. Several
// tensors are packed into the device fusion buffer (device-to-device
// copies on the stream), reduced there as one and unpacked; a single one
// is reduced in its output. A joined rank's zeros are host tensors, copied
// in from the host.
func (o *gpuOp) allreduce(resp *wire.Response) error {
	l, g, dev := o.l, o.l.r.gpu, o.dev
	start := time.Now()
	l.tlStart(l.ents, "ALLREDUCE", start)
	total := 0
	for _, e := range l.ents {
		total += e.in.NumBytes()
	}
	if dev == nil {
		return o.allreduceHost(resp, total)
	}
	for _, e := range l.ents {
		if e.out == nil {
			out, err := g.alloc(dev, e.in.DType(), e.in.Shape())
			if err != nil {
				return err
			}
			e.out = out
		}
	}
	single := len(l.ents) == 1 && l.ents[0].in.Device().Kind == tensor.GPU
	var buf uintptr
	if single {
		e := l.ents[0]
		buf = e.out.DevicePtr()
		if e.out != e.in {
			if err := dev.CopyDtoD(buf, e.in.DevicePtr(), total); err != nil {
				return err
			}
		}
	} else {
		var err error
		if buf, err = g.fusionBuffer(dev, total, l.cfg.FusionThreshold); err != nil {
			return err
		}
		off := uintptr(0)
		for _, e := range l.ents {
			n := e.in.NumBytes()
			if e.in.Device().Kind == tensor.GPU {
				err = dev.CopyDtoD(buf+off, e.in.DevicePtr(), n)
			} else {
				err = dev.CopyHtoD(buf+off, e.in.Bytes())
			}
			if err != nil {
				return err
			}
			off += uintptr(n)
		}
	}
	t1, err := o.mark()
	if err != nil {
		return err
	}
	if !single {
		l.tlActivity(l.ents, actMemcpyIn, start, t1)
	}
	if err := o.reduce(resp, buf, total, t1); err != nil {
		return err
	}
	if single {
		return nil
	}
	t2 := time.Now()
	off := uintptr(0)
	for _, e := range l.ents {
		n := e.out.NumBytes()
		if e.out.Device().Kind == tensor.GPU {
			err = dev.CopyDtoD(e.out.DevicePtr(), buf+off, n)
		} else {
			err = dev.CopyDtoH(e.out.Bytes(), buf+off)
		}
		if err != nil {
			return err
		}
		off += uintptr(n)
	}
	t3, err := o.mark()
	if err != nil {
		return err
	}
	l.tlActivity(l.ents, actMemcpyOut, t2, t3)
	return nil
}

// reduce allreduces total bytes of device memory at buf along o's path,
// with the response's scale factors.
func (o *gpuOp) reduce(resp *wire.Response, buf uintptr, total int, start time.Time) error {
	l, g, dev, dt := o.l, o.l.r.gpu, o.dev, o.dt
	op := toTensorOp(resp.Op)
	pre, post := resp.Prescale, l.postscale(resp)
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
		l.tlActivity(l.ents, actNCCLAllreduce, t1, t2)
		if post != 1 {
			if err := o.scaleOnHost(buf, total, post); err != nil {
				return err
			}
			l.tlActivity(l.ents, actScaleOnHost, t2, time.Now())
		}
		return nil
	case gpupath.CUDAAwareMPI:
		if err := o.scaleOnHost(buf, total, pre); err != nil {
			return err
		}
		// MPI does not know the device's stream: wait for the copies.
		if err := dev.Sync(); err != nil {
			return err
		}
		t1 := time.Now()
		if err := l.com.Allreduce(devTensor(dev, dt, buf, count), op); err != nil {
			return err
		}
		l.tlActivity(l.ents, actAllreduce, t1, time.Now())
		return o.scaleOnHost(buf, total, post)
	}
	h, err := g.hostBuffer(dev, total)
	if err != nil {
		return err
	}
	if err := dev.CopyDtoH(h, buf); err != nil {
		return err
	}
	if err := dev.Sync(); err != nil {
		return err
	}
	t1 := time.Now()
	l.tlActivity(l.ents, actMemcpyInHost, start, t1)
	tensor.Scale(dt, h, pre)
	if err := l.reduceBytes(h, dt, op); err != nil {
		return err
	}
	tensor.Scale(dt, h, post)
	t2 := time.Now()
	l.tlActivity(l.ents, actAllreduce, t1, t2)
	if err := dev.CopyHtoD(buf, h); err != nil {
		return err
	}
	t3, err := o.mark()
	if err != nil {
		return err
	}
	l.tlActivity(l.ents, actMemcpyOutHost, t2, t3)
	return nil
}

// allreduceHost is a GPU allreduce on a rank without a GPU: a joined rank
// whose zeros are host tensors. It issues the same host collectives as the
// staged path.
func (o *gpuOp) allreduceHost(resp *wire.Response, total int) error {
	l := o.l
	h, err := l.r.gpu.hostBuffer(nil, total)
	if err != nil {
		return err
	}
	off := 0
	for _, e := range l.ents {
		off += copy(h[off:], e.in.Bytes())
	}
	tensor.Scale(o.dt, h, resp.Prescale)
	if err := l.reduceBytes(h, o.dt, toTensorOp(resp.Op)); err != nil {
		return err
	}
	tensor.Scale(o.dt, h, l.postscale(resp))
	off = 0
	for _, e := range l.ents {
		off += copy(e.out.Bytes(), h[off:])
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
	l, dev := o.l, o.dev
	start := time.Now()
	total := 0
	for _, s := range ins {
		total += s.n
	}
	for _, s := range outs {
		total += s.n
	}
	h, err := l.r.gpu.hostBuffer(dev, total)
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
	l.tlActivity(l.ents, actMemcpyInHost, start, t1)
	if err := fn(hin, hout); err != nil {
		return err
	}
	t2 := time.Now()
	l.tlActivity(l.ents, act, t1, t2)
	for i, s := range outs {
		if err := dev.CopyHtoD(s.p, hout[i].Bytes()); err != nil {
			return err
		}
	}
	if err := dev.Sync(); err != nil {
		return err
	}
	l.tlActivity(l.ents, actMemcpyOutHost, t2, time.Now())
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
	o.l.tlActivity(o.l.ents, act, start, end)
	return nil
}

func (o *gpuOp) allgather(e *entry, resp *wire.Response) error {
	l, g, dev := o.l, o.l.r.gpu, o.dev
	row := rowElems(e.req.Shape)
	rows := 0
	counts := make([]int, l.size)
	for r := 0; r < l.size; r++ {
		counts[r] = int(resp.Sizes[r]) * row
		rows += int(resp.Sizes[r])
	}
	shape := intShape(e.req.Shape)
	shape[0] = rows
	out, err := g.alloc(dev, e.req.DType, shape)
	if err != nil {
		return err
	}
	e.out = out
	start := time.Now()
	switch o.path {
	case gpupath.NCCL:
		if err := g.nc.AllGatherV(e.in.DevicePtr(), out.DevicePtr(), counts, o.dt); err != nil {
			return err
		}
	case gpupath.CUDAAwareMPI:
		if err := dev.Sync(); err != nil {
			return err
		}
		if err := l.com.Allgatherv(e.in, out, counts); err != nil {
			return err
		}
	default:
		return o.staged(actAllgather, []span{{e.in.DevicePtr(), e.in.NumBytes()}}, []span{{out.DevicePtr(), out.NumBytes()}},
			func(in, outs []*tensor.Tensor) error { return l.com.Allgatherv(in[0], outs[0], counts) })
	}
	return o.activity(actNCCLAllgather, actAllgather, start)
}

func (o *gpuOp) broadcast(e *entry) error {
	l, g, dev := o.l, o.l.r.gpu, o.dev
	root := int(e.req.Root)
	if e.out == nil {
		out, err := g.alloc(dev, e.in.DType(), e.in.Shape())
		if err != nil {
			return err
		}
		e.out = out
	}
	n := e.out.NumBytes()
	if l.rank == root && e.out != e.in {
		if err := dev.CopyDtoD(e.out.DevicePtr(), e.in.DevicePtr(), n); err != nil {
			return err
		}
	}
	start := time.Now()
	switch o.path {
	case gpupath.NCCL:
		if err := g.nc.Broadcast(e.out.DevicePtr(), e.out.Len(), o.dt, root); err != nil {
			return err
		}
	case gpupath.CUDAAwareMPI:
		if err := dev.Sync(); err != nil {
			return err
		}
		if err := l.com.Bcast(e.out, root); err != nil {
			return err
		}
	default:
		return o.stagedBcast(e.out.DevicePtr(), n, root)
	}
	return o.activity(actNCCLBcast, actBcast, start)
}

// stagedBcast broadcasts n bytes of device memory at p through the staging
// buffer: the root copies them out, every rank receives, the others copy
// them in.
func (o *gpuOp) stagedBcast(p uintptr, n, root int) error {
	l, dev := o.l, o.dev
	start := time.Now()
	h, err := l.r.gpu.hostBuffer(dev, n)
	if err != nil {
		return err
	}
	if l.rank == root {
		if err := dev.CopyDtoH(h, p); err != nil {
			return err
		}
		if err := dev.Sync(); err != nil {
			return err
		}
	}
	t1 := time.Now()
	l.tlActivity(l.ents, actMemcpyInHost, start, t1)
	t, err := tensor.FromBytes(o.dt, h)
	if err != nil {
		return err
	}
	if err := l.com.Bcast(t, root); err != nil {
		return err
	}
	t2 := time.Now()
	l.tlActivity(l.ents, actBcast, t1, t2)
	if l.rank != root {
		if err := dev.CopyHtoD(p, h); err != nil {
			return err
		}
		if err := dev.Sync(); err != nil {
			return err
		}
	}
	l.tlActivity(l.ents, actMemcpyOutHost, t2, time.Now())
	return nil
}

func (o *gpuOp) alltoall(e *entry) error {
	l, g, dev := o.l, o.l.r.gpu, o.dev
	p, err := l.planAlltoall(e)
	if err != nil {
		return err
	}
	recvSplits, sendCounts, recvCounts, sent := p.recvSplits, p.sendCounts, p.recvCounts, p.sent
	out, err := g.alloc(dev, e.req.DType, p.shape)
	if err != nil {
		return err
	}
	e.out = out
	send := e.in.Rows(0, sent)
	start := time.Now()
	switch o.path {
	case gpupath.NCCL:
		err = g.nc.AllToAllV(send.DevicePtr(), sendCounts, out.DevicePtr(), recvCounts, o.dt)
	case gpupath.CUDAAwareMPI:
		if err = dev.Sync(); err == nil {
			err = l.com.Alltoallv(send, sendCounts, out, recvCounts)
		}
	default:
		err = o.staged(actAlltoall, []span{{send.DevicePtr(), send.NumBytes()}}, []span{{out.DevicePtr(), out.NumBytes()}},
			func(in, outs []*tensor.Tensor) error { return l.com.Alltoallv(in[0], sendCounts, outs[0], recvCounts) })
	}
	if err != nil {
		return err
	}
	e.h.splits = recvSplits
	if o.path == gpupath.Staged {
		return nil
	}
	return o.activity(actNCCLAlltoall, actAlltoall, start)
}

func (o *gpuOp) reducescatter(e *entry, resp *wire.Response) error {
	l, g, dev := o.l, o.l.r.gpu, o.dev
	shape := resp.Shapes[0]
	row := rowElems(shape)
	counts := make([]int, l.size)
	for r := 0; r < l.size; r++ {
		counts[r] = ReducescatterRows(int(shape[0]), l.size, r) * row
	}
	if e.out == nil {
		s := intShape(shape)
		s[0] = ReducescatterRows(s[0], l.size, l.rank)
		out, err := g.alloc(dev, e.req.DType, s)
		if err != nil {
			return err
		}
		e.out = out
	}
	pre, post := resp.Prescale, resp.Postscale
	if o.path == gpupath.Staged {
		return o.staged(actReduceScat, []span{{e.in.DevicePtr(), e.in.NumBytes()}}, []span{{e.out.DevicePtr(), e.out.NumBytes()}},
			func(in, outs []*tensor.Tensor) error {
				tensor.ScaleTensor(in[0], pre)
				if err := l.com.ReduceScatter(in[0], outs[0], counts, tensor.Sum); err != nil {
					return err
				}
				tensor.ScaleTensor(outs[0], post)
				return nil
			})
	}
	send := e.in.DevicePtr()
	n := e.in.NumBytes()
	if pre != 1 {
		// Scale a copy: the input is not the caller's to change.
		buf, err := g.fusionBuffer(dev, n, l.cfg.FusionThreshold)
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
		err = g.nc.ReduceScatterV(send, e.out.DevicePtr(), counts, o.dt, tensor.Sum)
	} else if err = dev.Sync(); err == nil {
		err = l.com.ReduceScatter(devTensor(dev, o.dt, send, n/o.dt.Size()), e.out, counts, tensor.Sum)
	}
	if err != nil {
		return err
	}
	if err := o.activity(actNCCLReduceScat, actReduceScat, start); err != nil {
		return err
	}
	return o.scaleOnHost(e.out.DevicePtr(), e.out.NumBytes(), post)
}
