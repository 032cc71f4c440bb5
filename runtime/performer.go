package runtime

import (
	"fmt"
	"time"
	"unsafe"
	"weak"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/gpuexec"
	"github.com/gohorovod/gohorovod/runtime/internal/hier"
	"github.com/gohorovod/gohorovod/runtime/internal/timeline"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// performer puts one agreed response on the wire: it owns what performing
// needs from cycle to cycle (the fusion buffer, the transport views, the
// chunk sizes, the per-rank counts) and nothing of the negotiation. The
// loop (the controller) takes the response's entries from the queue, hands
// them over, and afterwards completes their handles and draws them on the
// timeline from the activities the performer recorded (activity): the
// collectives themselves call neither the queue nor the timeline.
type performer struct {
	com        comm.Communicator
	rank, size int               // within the set
	cfg        *config.Config    // the loop's: autotuning changes it between cycles
	stats      *stats            // the runtime's counters
	log        *zerolog.Logger   // the loop's
	gpu        *gpuexec.Executor // GPU tensors go to it
	hier       *hier.Comms       // node-aware communicators, when hierarchical collectives are on (nodes.go)

	timing    bool       // a timeline is written: activities are recorded (set by the controller each cycle)
	acts      []activity // the activities of the response being performed
	fusion    []byte     // persistent fusion buffer, grown up to the threshold
	views     map[viewKey]weak.Pointer[tensor.Tensor]
	chunk     int             // bytes per collective call on large buffers; 0: no chunking
	fuseChunk int             // bytes of fused tensors copied, reduced and copied back at a time; 0: all
	wholeT    *tensor.Tensor  // the word of allWhole's agreement
	counts    []int           // per-rank counts of the collective being performed
	gpuEnts   []gpuexec.Entry // the entries, as the GPU executor takes them
}

// activity is one phase of a performed response (timeline's activity names:
// timeline.MPIAllreduce, timeline.MemcpyInFusion, ...), from start to end.
type activity struct {
	name       string
	start, end time.Time
}

// newPerformer returns the performer of a set whose communicator is com.
func newPerformer(com comm.Communicator, cfg *config.Config, st *stats, log *zerolog.Logger, gpu *gpuexec.Executor) *performer {
	return &performer{
		com: com, rank: com.Rank(), size: com.Size(), cfg: cfg, stats: st, log: log, gpu: gpu,
		views:     make(map[viewKey]weak.Pointer[tensor.Tensor]),
		chunk:     defaultChunkBytes,
		fuseChunk: defaultFusionChunkBytes,
		counts:    make([]int, com.Size()),
	}
}

// activity records one phase of the response being performed, when a
// timeline is written.
func (p *performer) activity(name string, start, end time.Time) {
	if p.timing {
		p.acts = append(p.acts, activity{name: name, start: start, end: end})
	}
}

// perform executes resp on ents, the entries the controller took for it, in
// order (a joined rank's zeros included), and sets their outputs. It
// returns the transport's error (or an internal one); what the error means
// for the runtime is the controller's decision (collectiveErr). The
// activities it went through are in p.acts afterwards.
func (p *performer) perform(resp *wire.Response, ents []*entry) error {
	p.acts = p.acts[:0]
	if onGPU(resp, p.rank) {
		return p.performGPU(resp, ents) // gpu.go
	}
	typ := wire.RequestType(resp.Type)
	switch typ {
	case wire.Allreduce:
		return p.allreduce(resp, ents)
	case wire.Adasum:
		return p.adasum(resp, ents) // adasum.go
	case wire.Join:
		return nil // the controller's: nothing goes on the wire
	}
	e := ents[0]
	start := time.Now()
	var err error
	act := ""
	switch typ {
	case wire.Allgather:
		act, err = timeline.MPIAllgather, p.allgather(e, resp)
	case wire.Broadcast:
		act, err = timeline.MPIBcast, p.broadcast(e)
	case wire.Alltoall:
		act = timeline.MPIAlltoall
		if e.exchange != nil {
			err = p.exchange(e) // exchange.go
		} else {
			err = p.alltoall(e)
		}
	case wire.Reducescatter:
		act, err = timeline.MPIReduceScat, p.reducescatter(e, resp)
	case wire.Barrier:
		act, err = timeline.MPIBarrier, p.com.Barrier()
	default:
		return fmt.Errorf("internal: unknown response type %v", resp.Type)
	}
	p.activity(act, start, time.Now())
	return err
}

func (p *performer) broadcast(e *entry) error {
	if p.rank == int(e.req.Root) {
		p.stats.sent.Add(int64(e.out.NumBytes()))
		if e.out != e.in {
			copy(e.out.Bytes(), e.in.Bytes())
		}
	}
	return p.com.Bcast(e.out, int(e.req.Root))
}

// logFused logs, at debug, how a fused allreduce went: its bytes, how many
// were reduced where they lie (views of one buffer) and how many copied
// through the fusion buffer, in how many pieces of at most step bytes.
func (p *performer) logFused(ents []*entry, total, inPlace, step int) {
	pieces := 0
	if step > 0 {
		pieces = (total + step - 1) / step
	}
	p.log.Debug().Str("first", ents[0].req.Name).Int("tensors", len(ents)).Int("bytes", total).
		Int("in_place", inPlace).Int("copied", total-inPlace).Int("pieces", pieces).Msg("fused allreduce")
}

func rowElems(shape []int64) int {
	n := 1
	for _, d := range shape[1:] {
		n *= int(d)
	}
	return n
}

// reduceBytes allreduces b (elements of dt) in place, in chunks of at most
// p.chunk bytes when chunking is on.
func (p *performer) reduceBytes(b []byte, dt tensor.DType, op tensor.ReduceOp) error {
	step := len(b)
	if p.chunk > 0 && p.chunk < step {
		step = p.chunk - p.chunk%dt.Size()
	}
	for off := 0; off < len(b); off += step {
		end := min(off+step, len(b))
		t, err := p.view(dt, b[off:end])
		if err != nil {
			return err
		}
		if p.hier != nil && p.cfg.HierarchicalAllreduce {
			err = p.hier.Allreduce(t, op) // reduce-scatter in the node, allreduce across, allgather in the node
			p.stats.hierAR.Add(1)
		} else {
			err = p.com.Allreduce(t, op)
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
func (p *performer) view(dt tensor.DType, b []byte) (*tensor.Tensor, error) {
	k := viewKey{p: uintptr(unsafe.Pointer(unsafe.SliceData(b))), n: len(b), dt: dt}
	if t := p.views[k].Value(); t != nil {
		return t, nil
	}
	t, err := tensor.FromBytes(dt, b)
	if err != nil {
		return nil, err
	}
	if len(p.views) >= maxViews {
		clear(p.views)
	}
	p.views[k] = weak.Make(t)
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
func (p *performer) fusionBuffer(n int) []byte {
	if len(p.fusion) < n {
		size := max(n, min(2*len(p.fusion), int(p.cfg.FusionThreshold)))
		raw := make([]byte, size+4096)
		off := (fusionAlign - int(uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%4096) + 4096) % 4096
		p.fusion = raw[off : off+size : off+size]
		for i := 0; i < size; i += 4096 {
			p.fusion[i] = 0 // fault every page in now, not inside the collective
		}
	}
	return p.fusion[:n]
}

// allreduce reduces the entries of an allreduce response: one tensor in
// place (in transport chunks), or several fused, piece by piece through
// the fusion buffer or, where they lie in one run of memory on every rank,
// where they lie.
func (p *performer) allreduce(resp *wire.Response, ents []*entry) error {
	dt, op := resp.DType, resp.Op.Kernel()
	total := 0
	for _, e := range ents {
		total += e.in.NumBytes()
	}
	p.stats.sent.Add(sentShare(total, 2*(p.size-1), p.size))
	pre, post := resp.Prescale, resp.PostscaleOver(p.size)
	if len(ents) == 1 {
		return p.allreduceOne(ents[0], dt, op, pre, post)
	}
	return p.allreduceFused(ents, total, dt, op, pre, post)
}

// allreduceOne reduces one tensor: in one transport call when it fits in a
// chunk, else chunk by chunk.
func (p *performer) allreduceOne(e *entry, dt tensor.DType, op tensor.ReduceOp, pre, post float64) error {
	start := time.Now()
	if e.out != e.in {
		copy(e.out.Bytes(), e.in.Bytes())
	}
	b := e.out.Bytes()
	tensor.Scale(dt, b, pre)
	var err error
	if len(b) > 0 && (p.chunk == 0 || len(b) <= p.chunk) {
		err = p.com.Allreduce(e.out, op) // one call: no view to make
	} else {
		err = p.reduceBytes(b, dt, op)
	}
	if err != nil {
		return err
	}
	tensor.Scale(dt, b, post)
	p.activity(timeline.MPIAllreduce, start, time.Now())
	return nil
}

// allreduceFused reduces several tensors (total bytes) one piece at a time:
// copy the piece's bytes in, reduce them, copy them out, while they are
// still in cache. The fusion buffer is one piece, reused.
func (p *performer) allreduceFused(ents []*entry, total int, dt tensor.DType, op tensor.ReduceOp, pre, post float64) error {
	start := time.Now()
	step := total
	if p.fuseChunk > 0 && p.fuseChunk < step {
		step = max(p.fuseChunk-p.fuseChunk%dt.Size(), dt.Size())
	}
	in, out := fusedCursor{ents: ents}, fusedCursor{ents: ents, out: true}
	var t1, t2 time.Time
	placed := 0
	piece := step
	if step < total {
		// Several pieces. Where the whole response lies in one run of
		// memory on every rank, it is reduced where it lies in transport
		// chunks instead: the pieces only keep copies in cache, and each
		// is one more collective to wait in. The ranks' layouts may
		// differ and their calls must not, so they agree first.
		whole, err := p.allWhole(&in, total)
		if err != nil {
			return err
		}
		if whole {
			step = total
			p.stats.whole.Add(1)
		}
	}
	buf := p.fusionBuffer(piece)
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
		if err := p.reduceBytes(b, dt, op); err != nil {
			return err
		}
		if off+n >= total {
			t2 = time.Now()
		}
		tensor.Scale(dt, b, post)
		if !inPlace {
			out.copy(b)
		}
	}
	if p.log.Debug().Enabled() {
		p.logFused(ents, total, placed, step)
	}
	p.stats.inPlace.Add(int64(placed))
	p.stats.copied.Add(int64(total - placed))
	// With more than one chunk the copies interleave with the transport:
	// the spans are those of the first copy in, the reductions and the
	// last copy out.
	end := time.Now()
	p.activity(timeline.MemcpyInFusion, start, t1)
	p.activity(timeline.MPIAllreduce, t1, t2)
	p.activity(timeline.MemcpyOutFusion, t2, end)
	return nil
}

// reduceRun reduces ents, which lie in one run of memory on every rank
// (see loop.performRun), in one reduction where they lie, as first
// (every response of the run has its type, reduction and scaling).
func (p *performer) reduceRun(first *wire.Response, ents []*entry) error {
	p.acts = p.acts[:0]
	total := 0
	for _, e := range ents {
		total += e.in.NumBytes()
	}
	p.stats.sent.Add(sentShare(total, 2*(p.size-1), p.size))
	dt, op := first.DType, first.Op.Kernel()
	b := ents[0].in.Bytes()[:total]
	start := time.Now()
	tensor.Scale(dt, b, first.Prescale)
	if err := p.reduceBytes(b, dt, op); err != nil {
		return err
	}
	tensor.Scale(dt, b, first.PostscaleOver(p.size))
	p.stats.runs.Add(1)
	if len(ents) > 1 {
		p.stats.inPlace.Add(int64(total))
		p.stats.whole.Add(1)
	}
	p.activity(timeline.MPIAllreduce, start, time.Now())
	return nil
}

// allWhole reports whether every rank's entries of the response being
// performed (total bytes, from in's position) lie in one run of memory
// that is reduced in place (see fusedCursor.run): one bitwise-AND
// allreduce of one word, which every rank makes for the same responses.
func (p *performer) allWhole(in *fusedCursor, total int) (bool, error) {
	if p.size == 1 {
		_, ok := in.run(total)
		return ok, nil
	}
	if p.wholeT == nil {
		p.wholeT = tensor.New(tensor.Uint64, 1)
	}
	w := p.wholeT.Uint64s()
	w[0] = 0
	if _, ok := in.run(total); ok {
		w[0] = 1
	}
	if err := p.com.Allreduce(p.wholeT, tensor.BitAnd); err != nil {
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

func (p *performer) allgather(e *entry, resp *wire.Response) error {
	row := rowElems(e.req.Shape)
	rows := 0
	for r := 0; r < p.size; r++ {
		p.counts[r] = int(resp.Sizes[r]) * row
		rows += int(resp.Sizes[r])
	}
	shape := wire.IntShape(e.req.Shape)
	shape[0] = rows
	e.out = tensor.New(e.req.DType, shape...)
	p.stats.sent.Add(int64(e.in.NumBytes()) * int64(p.size-1))
	if p.hier != nil && p.cfg.HierarchicalAllgather {
		p.stats.hierAG.Add(1)
		return p.hier.Allgatherv(e.in, e.out, p.counts) // gather in the node, allgather across, broadcast in the node
	}
	return p.com.Allgatherv(e.in, e.out, p.counts)
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
func (p *performer) planAlltoall(e *entry) (alltoallPlan, error) {
	n := p.size
	mine := make([]int64, n)
	for i, s := range e.splits {
		mine[i] = int64(s)
	}
	all := make([]int64, n*n)
	counts := make([]int, n)
	for i := range counts {
		counts[i] = n
	}
	if err := p.com.Allgatherv(tensor.FromInt64(mine), tensor.FromInt64(all), counts); err != nil {
		return alltoallPlan{}, err
	}
	row := rowElems(e.req.Shape)
	pl := alltoallPlan{recvSplits: make([]int, n), sendCounts: make([]int, n), recvCounts: make([]int, n)}
	rows := 0
	for r := 0; r < n; r++ {
		pl.recvSplits[r] = int(all[r*n+p.rank])
		rows += pl.recvSplits[r]
		pl.sent += e.splits[r]
		pl.sendCounts[r] = e.splits[r] * row
		pl.recvCounts[r] = pl.recvSplits[r] * row
	}
	pl.shape = wire.IntShape(e.req.Shape)
	pl.shape[0] = rows
	return pl, nil
}

func (p *performer) alltoall(e *entry) error {
	pl, err := p.planAlltoall(e)
	if err != nil {
		return err
	}
	e.out = tensor.New(e.req.DType, pl.shape...)
	if err := p.com.Alltoallv(e.in.Rows(0, pl.sent), pl.sendCounts, e.out, pl.recvCounts); err != nil {
		return err
	}
	e.h.splits = pl.recvSplits
	others := pl.sent - e.splits[p.rank]
	p.stats.sent.Add(int64(others * rowElems(e.req.Shape) * e.req.DType.Size()))
	return nil
}

func (p *performer) reducescatter(e *entry, resp *wire.Response) error {
	shape := resp.Shapes[0]
	row := rowElems(shape)
	for r := 0; r < p.size; r++ {
		p.counts[r] = ReducescatterRows(int(shape[0]), p.size, r) * row
	}
	send := e.in
	if resp.Prescale != 1 {
		send = e.in.Clone()
		tensor.ScaleTensor(send, resp.Prescale)
	}
	p.stats.sent.Add(sentShare(send.NumBytes(), p.size-1, p.size))
	if err := p.com.ReduceScatter(send, e.out, p.counts, tensor.Sum); err != nil {
		return err
	}
	tensor.ScaleTensor(e.out, resp.Postscale)
	return nil
}
