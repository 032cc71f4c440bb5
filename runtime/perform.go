package runtime

import (
	"errors"
	"fmt"
	"time"
	"unsafe"
	"weak"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/internal/timeline"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

func rowElems(shape []int64) int {
	n := 1
	for _, d := range shape[1:] {
		n *= int(d)
	}
	return n
}

// tlStart opens the timeline spans of the entries of one response, at
// now; a cached entry's wait since it was enqueued is drawn before its span
// (see timeline.Timeline.Start). Every tlStart is matched by a tlEnd, on
// failure too, and the activities between them lie in [now, end].
func (l *loop) tlStart(ents []*entry, op string, now time.Time) {
	if l.tl == nil {
		return
	}
	for _, e := range ents {
		l.tl.Start(e.req.Name, op, e.enqueued, now)
	}
}

// tlActivity draws one activity of the entries' operations, from start to
// end.
func (l *loop) tlActivity(ents []*entry, act string, start, end time.Time) {
	if l.tl == nil {
		return
	}
	for _, e := range ents {
		l.tl.ActivityStart(e.req.Name, act, start)
		l.tl.ActivityEnd(e.req.Name, end)
	}
}

// tlEnd closes the spans tlStart opened.
func (l *loop) tlEnd(ents []*entry, now time.Time) {
	if l.tl == nil {
		return
	}
	for _, e := range ents {
		l.tl.End(e.req.Name, e.req.DType.String(), wire.FormatShape(e.req.Shape), now)
	}
}

// finish completes the entries of a performed response. Consecutive
// entries of one handle (a group's tensors) count down its pending tensors
// with one atomic operation.
func finish(ents []*entry) {
	for i := 0; i < len(ents); {
		h := ents[i].h
		j := i
		for ; j < len(ents) && ents[j].h == h; j++ {
			if h != nil {
				h.outs[ents[j].idx] = ents[j].out
			}
		}
		if h != nil {
			if h.pending.Add(-int32(j-i)) == 0 {
				h.once.Do(func() { close(h.done) })
			}
		}
		i = j
	}
}

// collectiveErr decides what a communicator error means: arguments that
// disagree are the operation's error, anything else stops the runtime.
func collectiveErr(ents []*entry, err error) error {
	var mm *comm.MismatchError
	if errors.As(err, &mm) {
		for _, e := range ents {
			if e.h != nil {
				e.h.fail(fmt.Errorf("hvd: %s: %w", e.req.Name, err))
			}
		}
		return nil
	}
	return err
}

// perform executes one response. It returns an error only when the
// communicator has failed and the runtime must stop.
func (l *loop) perform(resp *wire.Response) error {
	if l.log.Trace().Enabled() {
		l.tracePerform(resp)
	}
	if onGPU(resp, l.rank) {
		return l.performGPU(resp) // gpu.go
	}
	switch wire.RequestType(resp.Type) {
	case wire.Allreduce:
		return l.allreduce(resp)
	case wire.Adasum:
		return l.adasum(resp)
	}
	if resp.Type == wire.Error {
		for _, name := range resp.Names {
			if e := l.q.take(name); e != nil {
				e.h.fail(&OpError{Name: name, Message: resp.Error})
			}
		}
		return nil
	}
	e := l.q.take(resp.Names[0])
	if e == nil {
		return fmt.Errorf("internal: response %v for %q, which this rank did not submit", resp.Type, resp.Names[0])
	}
	l.ents = append(l.ents[:0], e)
	if e.setOp != nil {
		// A process set registration (processset_dynamic.go); it completes
		// the handle itself.
		if err := l.performSetOp(e); err != nil {
			return collectiveErr(l.ents, err)
		}
		l.ents = l.ents[:0]
		return nil
	}
	start := time.Now()
	l.tlStart(l.ents, resp.Type.String(), start)
	var err error
	act := ""
	switch wire.RequestType(resp.Type) {
	case wire.Allgather:
		act = timeline.MPIAllgather
		err = l.allgather(e, resp)
	case wire.Broadcast:
		act = timeline.MPIBcast
		if l.rank == int(e.req.Root) {
			l.r.stats.sent.Add(int64(e.out.NumBytes()))
			if e.out != e.in {
				copy(e.out.Bytes(), e.in.Bytes())
			}
		}
		err = l.com.Bcast(e.out, int(e.req.Root))
	case wire.Alltoall:
		act = timeline.MPIAlltoall
		if e.exchange != nil {
			err = l.exchange(e) // exchange.go
		} else {
			err = l.alltoall(e)
		}
	case wire.Reducescatter:
		act = timeline.MPIReduceScat
		err = l.reducescatter(e, resp)
	case wire.Barrier:
		act = timeline.MPIBarrier
		err = l.com.Barrier()
	case wire.Join:
		l.st.Unjoin()
		e.h.joinRank = l.set.globalRank(int(resp.LastJoinedRank)) // Join reports a global rank
	default:
		err = fmt.Errorf("internal: unknown response type %v", resp.Type)
	}
	end := time.Now()
	if act != "" {
		l.tlActivity(l.ents, act, start, end)
	}
	l.tlEnd(l.ents, end)
	if err != nil {
		return collectiveErr(l.ents, err)
	}
	finish(l.ents)
	return nil
}

// entries takes the entries of an allreduce-like response; a joined rank
// contributes zeros for names it never submitted.
func (l *loop) entries(resp *wire.Response) error {
	// The entries of cached responses are known already (l.respEnts), one
	// per source response: no name is looked up then.
	l.ents = l.q.takeAll(l.ents[:0], resp.Names, l.respEnts, l.sources)
	for i, name := range resp.Names {
		if e := l.ents[i]; e == nil {
			if !l.st.Joined() {
				return fmt.Errorf("internal: response for %q, which this rank did not submit", name)
			}
			z := tensor.New(resp.DType, wire.IntShape(resp.Shapes[i])...)
			l.ents[i] = &entry{req: wire.Request{Name: name, Type: wire.RequestType(resp.Type), DType: resp.DType, Shape: resp.Shapes[i]},
				in: z, out: z}
		}
	}
	return nil
}

// reduceBytes allreduces b (elements of dt) in place, in chunks of at most
// l.chunk bytes when chunking is on.
func (l *loop) reduceBytes(b []byte, dt tensor.DType, op tensor.ReduceOp) error {
	step := len(b)
	if l.chunk > 0 && l.chunk < step {
		step = l.chunk - l.chunk%dt.Size()
	}
	for off := 0; off < len(b); off += step {
		end := min(off+step, len(b))
		t, err := l.view(dt, b[off:end])
		if err != nil {
			return err
		}
		if l.hier != nil && l.cfg.HierarchicalAllreduce {
			err = l.hier.Allreduce(t, op) // reduce-scatter in the node, allreduce across, allgather in the node
			l.r.stats.hierAR.Add(1)
		} else {
			err = l.com.Allreduce(t, op)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// viewKey identifies a transport view: where it starts (an address, not
// a pointer, so that the key keeps nothing alive), its length, its element
// type.
type viewKey struct {
	p  uintptr
	n  int
	dt tensor.DType
}

// maxViews bounds the views kept; past it they are all dropped.
const maxViews = 1024

// view returns a tensor over b (not empty), reusing the one made for the
// same bytes before: the fusion buffer's pieces, a tensor's chunks and the
// pieces of flat buffers come back cycle after cycle, and a view each time
// would make allocations grow with the number of tensors. The views are
// held weakly, so that they never keep a caller's memory alive: one the
// collector took is made again.
func (l *loop) view(dt tensor.DType, b []byte) (*tensor.Tensor, error) {
	k := viewKey{p: uintptr(unsafe.Pointer(unsafe.SliceData(b))), n: len(b), dt: dt}
	if t := l.views[k].Value(); t != nil {
		return t, nil
	}
	t, err := tensor.FromBytes(dt, b)
	if err != nil {
		return nil, err
	}
	if len(l.views) >= maxViews {
		clear(l.views)
	}
	l.views[k] = weak.Make(t)
	return t, nil
}

// fusionAlign is where the fusion buffer starts within a 4 KiB page.
// Tensors of a page or more are page-aligned in Go's heap; copying between
// addresses equal modulo 4 KiB makes loads wait on unrelated stores (4K
// aliasing). Half a page plus a cache line apart, the copies in and out of
// the buffer avoid it (measured in docs/BENCHMARKS.md).
const fusionAlign = 2048 + 64

// fusionBuffer returns the persistent fusion buffer with room for n bytes,
// growing it (pre-faulted) when needed.
func (l *loop) fusionBuffer(n int) []byte {
	if len(l.fusion) < n {
		size := max(n, min(2*len(l.fusion), int(l.cfg.FusionThreshold)))
		raw := make([]byte, size+4096)
		off := (fusionAlign - int(uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%4096) + 4096) % 4096
		l.fusion = raw[off : off+size : off+size]
		for i := 0; i < size; i += 4096 {
			l.fusion[i] = 0 // fault every page in now, not inside the collective
		}
	}
	return l.fusion[:n]
}

func (l *loop) allreduce(resp *wire.Response) error {
	if err := l.entries(resp); err != nil {
		return err
	}
	dt, op := resp.DType, resp.Op.Kernel()
	total := 0
	for _, e := range l.ents {
		total += e.in.NumBytes()
	}
	l.r.stats.sent.Add(sentShare(total, 2*(l.size-1), l.size))
	pre, post := resp.Prescale, resp.PostscaleOver(l.size)
	start := time.Now()
	l.tlStart(l.ents, "ALLREDUCE", start)
	if len(l.ents) == 1 {
		e := l.ents[0]
		if e.out != e.in {
			copy(e.out.Bytes(), e.in.Bytes())
		}
		b := e.out.Bytes()
		tensor.Scale(dt, b, pre)
		var err error
		if len(b) > 0 && (l.chunk == 0 || len(b) <= l.chunk) {
			err = l.com.Allreduce(e.out, op) // one call: no view to make
		} else {
			err = l.reduceBytes(b, dt, op)
		}
		if err != nil {
			l.tlEnd(l.ents, time.Now())
			return collectiveErr(l.ents, err)
		}
		tensor.Scale(dt, b, post)
		end := time.Now()
		l.tlActivity(l.ents, timeline.MPIAllreduce, start, end)
		l.tlEnd(l.ents, end)
		finish(l.ents)
		return nil
	}
	// The fused tensors are reduced one piece at a time: copy the piece's
	// bytes in, reduce them, copy them out, while they are still in cache.
	// The fusion buffer is one piece, reused.
	step := total
	if l.fuseChunk > 0 && l.fuseChunk < step {
		step = max(l.fuseChunk-l.fuseChunk%dt.Size(), dt.Size())
	}
	in, out := fusedCursor{ents: l.ents}, fusedCursor{ents: l.ents, out: true}
	var t1, t2 time.Time
	placed := 0
	piece := step
	if step < total {
		// Several pieces. Where the whole response lies in one run of
		// memory on every rank, it is reduced where it lies in transport
		// chunks instead: the pieces only keep copies in cache, and each
		// is one more collective to wait in. The ranks' layouts may
		// differ and their calls must not, so they agree first.
		whole, err := l.allWhole(&in, total)
		if err != nil {
			l.tlEnd(l.ents, time.Now())
			return collectiveErr(l.ents, err)
		}
		if whole {
			step = total
			l.r.stats.whole.Add(1)
		}
	}
	buf := l.fusionBuffer(piece)
	for off := 0; off < total; off += step {
		n := min(step, total-off)
		// A piece that is one run of memory already (gradients that are
		// views of one flat buffer) is reduced where it lies. Every rank
		// makes the same calls on the same pieces whatever its layout,
		// so ranks may differ in this.
		b, inPlace := in.run(n)
		if inPlace {
			in.skip(n)
			out.skip(n)
			placed += n
		} else {
			b = buf[:n]
			in.copy(b)
		}
		tensor.Scale(dt, b, pre)
		if off == 0 {
			t1 = time.Now()
		}
		if err := l.reduceBytes(b, dt, op); err != nil {
			l.tlEnd(l.ents, time.Now())
			return collectiveErr(l.ents, err)
		}
		if off+n >= total {
			t2 = time.Now()
		}
		tensor.Scale(dt, b, post)
		if !inPlace {
			out.copy(b)
		}
	}
	if l.log.Debug().Enabled() {
		l.logFused(total, placed, step)
	}
	l.r.stats.inPlace.Add(int64(placed))
	l.r.stats.copied.Add(int64(total - placed))
	end := time.Now()
	if l.tl != nil {
		// With more than one chunk the copies interleave with the
		// transport: the spans are those of the first copy in, the
		// reductions and the last copy out.
		l.tlActivity(l.ents, timeline.MemcpyInFusion, start, t1)
		l.tlActivity(l.ents, timeline.MPIAllreduce, t1, t2)
		l.tlActivity(l.ents, timeline.MemcpyOutFusion, t2, end)
		l.tlEnd(l.ents, end)
	}
	finish(l.ents)
	return nil
}

// performRun reduces ents, which lie in one run of memory on every rank
// (runOfMemory, agreed in the static schedule's header), in one reduction
// where they lie: the allreduce of their first response's type,
// reduction and scaling (every response of the run has the same).
func (l *loop) performRun(first *wire.Response, ents []*entry) error {
	l.performed = true
	if !l.q.release(ents) {
		return errors.New("internal: a request left the flight before its static unit was performed")
	}
	l.ents = append(l.ents[:0], ents...)
	total := 0
	for _, e := range ents {
		total += e.in.NumBytes()
	}
	l.r.stats.sent.Add(sentShare(total, 2*(l.size-1), l.size))
	dt, op := first.DType, first.Op.Kernel()
	b := ents[0].in.Bytes()[:total]
	start := time.Now()
	l.tlStart(l.ents, "ALLREDUCE", start)
	tensor.Scale(dt, b, first.Prescale)
	if err := l.reduceBytes(b, dt, op); err != nil {
		l.tlEnd(l.ents, time.Now())
		return collectiveErr(l.ents, err)
	}
	tensor.Scale(dt, b, first.PostscaleOver(l.size))
	l.r.stats.runs.Add(1)
	if len(ents) > 1 {
		l.r.stats.inPlace.Add(int64(total))
		l.r.stats.whole.Add(1)
	}
	if l.tl != nil {
		end := time.Now()
		l.tlActivity(l.ents, timeline.MPIAllreduce, start, end)
		l.tlEnd(l.ents, end)
		if err := l.tl.Flush(); err != nil {
			l.log.Error().Err(err).Msg("timeline")
		}
	}
	finish(l.ents)
	return nil
}

// allWhole reports whether every rank's entries of the response being
// performed (total bytes, from in's position) lie in one run of memory
// that is reduced in place (see fusedCursor.run): one bitwise-AND
// allreduce of one word, which every rank makes for the same responses.
func (l *loop) allWhole(in *fusedCursor, total int) (bool, error) {
	if l.size == 1 {
		_, ok := in.run(total)
		return ok, nil
	}
	if l.wholeT == nil {
		l.wholeT = tensor.New(tensor.Uint64, 1)
	}
	w := l.wholeT.Uint64s()
	w[0] = 0
	if _, ok := in.run(total); ok {
		w[0] = 1
	}
	if err := l.com.Allreduce(l.wholeT, tensor.BitAnd); err != nil {
		return false, err
	}
	return w[0] == 1, nil
}

// fusedCursor walks the concatenation of the entries' inputs (or outputs),
// copying consecutive runs of it to (or from) a chunk of the fusion buffer.
type fusedCursor struct {
	ents []*entry
	out  bool // copy the chunk to the outputs rather than from the inputs
	i    int  // current entry
	off  int  // bytes of it already copied
}

// run returns the next n bytes of the concatenation as one slice of
// memory, when they are: the entries they span are reduced in place (input
// and output the same tensor) and each follows the one before in one
// allocation (tensor.Follows).
func (c *fusedCursor) run(n int) ([]byte, bool) {
	e := c.ents[c.i]
	if e.in != e.out {
		return nil, false
	}
	b := e.in.Bytes()[c.off:]
	have := len(b)
	prev := e.in
	for j := c.i + 1; have < n; j++ {
		f := c.ents[j]
		if f.in != f.out {
			return nil, false
		}
		if f.in.NumBytes() == 0 {
			continue
		}
		if !tensor.Follows(f.in, prev) || have+f.in.NumBytes() > cap(b) {
			return nil, false
		}
		have += f.in.NumBytes()
		prev = f.in
	}
	return b[:n], true
}

// skip moves the cursor n bytes on without copying.
func (c *fusedCursor) skip(n int) {
	for n > 0 {
		left := c.ents[c.i].in.NumBytes() - c.off
		if n < left {
			c.off += n
			return
		}
		n -= left
		c.i, c.off = c.i+1, 0
	}
}

// copy moves the next len(b) bytes of the concatenation to or from b.
func (c *fusedCursor) copy(b []byte) {
	for k := 0; k < len(b); {
		e := c.ents[c.i]
		t := e.in
		if c.out {
			t = e.out
		}
		tb := t.Bytes()
		var n int
		if c.out {
			n = copy(tb[c.off:], b[k:])
		} else {
			n = copy(b[k:], tb[c.off:])
		}
		k += n
		if c.off += n; c.off == len(tb) {
			c.i, c.off = c.i+1, 0
		}
	}
}

func (l *loop) allgather(e *entry, resp *wire.Response) error {
	row := rowElems(e.req.Shape)
	rows := 0
	for r := 0; r < l.size; r++ {
		l.counts[r] = int(resp.Sizes[r]) * row
		rows += int(resp.Sizes[r])
	}
	shape := wire.IntShape(e.req.Shape)
	shape[0] = rows
	e.out = tensor.New(e.req.DType, shape...)
	l.r.stats.sent.Add(int64(e.in.NumBytes()) * int64(l.size-1))
	if l.hier != nil && l.cfg.HierarchicalAllgather {
		l.r.stats.hierAG.Add(1)
		return l.hier.Allgatherv(e.in, e.out, l.counts) // gather in the node, allgather across, broadcast in the node
	}
	return l.com.Allgatherv(e.in, e.out, l.counts)
}

// alltoallPlan is what every rank learns before an alltoall moves data:
// the rows it receives from each rank, the element counts to send and
// receive, the rows it sends and the shape of its output.
type alltoallPlan struct {
	recvSplits, sendCounts, recvCounts []int
	sent                               int
	shape                              []int
}

// planAlltoall exchanges the ranks' splits (one allgather of size x size
// integers) and derives the counts for e's alltoall; host and GPU paths
// share it.
func (l *loop) planAlltoall(e *entry) (alltoallPlan, error) {
	n := l.size
	mine := make([]int64, n)
	for i, s := range e.splits {
		mine[i] = int64(s)
	}
	all := make([]int64, n*n)
	counts := make([]int, n)
	for i := range counts {
		counts[i] = n
	}
	if err := l.com.Allgatherv(tensor.FromInt64(mine), tensor.FromInt64(all), counts); err != nil {
		return alltoallPlan{}, err
	}
	row := rowElems(e.req.Shape)
	p := alltoallPlan{recvSplits: make([]int, n), sendCounts: make([]int, n), recvCounts: make([]int, n)}
	rows := 0
	for r := 0; r < n; r++ {
		p.recvSplits[r] = int(all[r*n+l.rank])
		rows += p.recvSplits[r]
		p.sent += e.splits[r]
		p.sendCounts[r] = e.splits[r] * row
		p.recvCounts[r] = p.recvSplits[r] * row
	}
	p.shape = wire.IntShape(e.req.Shape)
	p.shape[0] = rows
	return p, nil
}

func (l *loop) alltoall(e *entry) error {
	p, err := l.planAlltoall(e)
	if err != nil {
		return err
	}
	e.out = tensor.New(e.req.DType, p.shape...)
	if err := l.com.Alltoallv(e.in.Rows(0, p.sent), p.sendCounts, e.out, p.recvCounts); err != nil {
		return err
	}
	e.h.splits = p.recvSplits
	others := p.sent - e.splits[l.rank]
	l.r.stats.sent.Add(int64(others * rowElems(e.req.Shape) * e.req.DType.Size()))
	return nil
}

func (l *loop) reducescatter(e *entry, resp *wire.Response) error {
	shape := resp.Shapes[0]
	row := rowElems(shape)
	for r := 0; r < l.size; r++ {
		l.counts[r] = ReducescatterRows(int(shape[0]), l.size, r) * row
	}
	send := e.in
	if resp.Prescale != 1 {
		send = e.in.Clone()
		tensor.ScaleTensor(send, resp.Prescale)
	}
	l.r.stats.sent.Add(sentShare(send.NumBytes(), l.size-1, l.size))
	if err := l.com.ReduceScatter(send, e.out, l.counts, tensor.Sum); err != nil {
		return err
	}
	tensor.ScaleTensor(e.out, resp.Postscale)
	return nil
}
