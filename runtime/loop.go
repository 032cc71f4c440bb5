package runtime

import (
	"errors"
	"fmt"
	"time"
	"weak"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/cache"
	"github.com/gohorovod/gohorovod/runtime/internal/fusion"
	"github.com/gohorovod/gohorovod/runtime/internal/negotiate"
	"github.com/gohorovod/gohorovod/runtime/internal/stall"
	"github.com/gohorovod/gohorovod/runtime/internal/timeline"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// loop is the background goroutine's state: it alone touches the
// communicator, the cache, the coordinator and the fusion buffer.
type loop struct {
	r          *Runtime
	com        comm.Communicator
	rank, size int
	cfg        config.Config
	log        zerolog.Logger
	stopReq    <-chan struct{}

	cache     *cache.Cache
	sync      cache.Sync
	coord     *negotiate.Coordinator // rank 0 only
	planner   fusion.Planner
	stall     *stall.Inspector
	tl        *timeline.Timeline                      // rank 0 while a timeline is written (timeline.go)
	fusion    []byte                                  // persistent fusion buffer, grown up to the threshold
	views     map[viewKey]weak.Pointer[tensor.Tensor] // transport views, reused (see view)
	chunk     int                                     // bytes per collective call on large buffers; 0: no chunking
	fuseChunk int                                     // bytes of fused tensors copied, reduced and copied back at a time; 0: all
	joined    bool
	performed bool      // the last cycle performed at least one response
	slow      bool      // the last cycle negotiated
	syncedAt  time.Time // when the last agreement allreduce returned
	stallErr  error
	invalid   map[string]bool // cached names to force through negotiation
	checker   comm.AgreementChecker

	// Reused from cycle to cycle.
	msgs, hits, uncached, back []*entry
	byBit                      []*entry // this cycle's common hits, by cache bit
	respEnts                   []*entry // the entry of each of l.responses, when known
	sources                    []int    // indices in l.responses of the response performed
	hitBits, common, inv       []int
	responses                  []wire.Response
	ents                       []*entry
	reqList                    wire.RequestList
	sendBuf, recvBuf           []byte
	syncT, invT                *tensor.Tensor
	lenMine, lens              []int64
	ones                       []int
	counts                     []int
}

func newLoop(r *Runtime) (*loop, error) {
	l := &loop{
		r: r, com: r.com, rank: r.rank, size: r.size, cfg: r.cfg, log: r.log, stopReq: r.stopReq,
		cache:     cache.New(r.cfg.CacheCapacity, r.rank),
		invalid:   make(map[string]bool),
		views:     make(map[viewKey]weak.Pointer[tensor.Tensor]),
		chunk:     defaultChunkBytes,
		fuseChunk: defaultFusionChunkBytes,
		planner:   fusion.Planner{MaxFused: defaultMaxFusedBytes},
		lenMine:   make([]int64, 1),
		lens:      make([]int64, r.size),
		ones:      make([]int, r.size),
		counts:    make([]int, r.size),
	}
	for i := range l.ones {
		l.ones[i] = 1
	}
	// Negotiation guarantees that the ranks' arguments agree, so the
	// transport's own agreement check (one extra collective per call) is
	// off, except while negotiating.
	if c, ok := l.com.(comm.AgreementChecker); ok {
		l.checker = c
		c.SetCheck(false)
	}
	if l.rank == 0 {
		l.coord = negotiate.New(l.size)
	}
	s, warning := stall.New(stall.Config{Disabled: r.cfg.StallCheckDisable, Warn: r.cfg.StallCheckTime,
		Shutdown: r.cfg.StallShutdownTime})
	if warning != "" && l.rank == 0 {
		l.log.Warn().Msg(warning)
	}
	l.stall = s
	if err := l.openTimeline(); err != nil { // timeline.go
		return nil, err
	}
	return l, nil
}

// defaultChunkBytes is the largest buffer handed to one transport
// collective: larger tensors are reduced in chunks of this size, so that
// the transport's per-call temporaries stay in cache. Measured with
// cmd/hvdbench at np 2 (medians of 5 interleaved runs): one 64 MiB tensor
// took 8.9 ms in 4 MiB chunks, 8.8 in 1 MiB, 10.9 in 16 MiB and 37 ms in
// one call; ResNet-50's gradients 13.8 ms in 4 or 1 MiB chunks, 15.0-15.1
// in 16 MiB or unchunked.
const defaultChunkBytes = 4 << 20

// defaultFusionChunkBytes is how much of a fused response is copied into
// the fusion buffer, reduced and copied out at a time, so that the bytes
// are still in cache (L2 is 1 MiB a core here) when the transport reads
// them and when they are copied back. Measured with cmd/hvdbench at np 2,
// 1000 tensors of 4 KiB: 0.66 ms in 256 KiB pieces against 1.1 ms in 1 MiB
// and 1.4 ms in 4 MiB (medians of 5 runs); the C yardstick's fused mode
// agrees (0.39 ms with a 256 KiB buffer, 0.75 ms with 4 MiB).
const defaultFusionChunkBytes = 256 << 10

// defaultMaxFusedBytes is the largest tensor copied into the fusion buffer;
// larger ones are reduced in place, which saves two copies that cost more
// than the transport call they would share. Measured with cmd/hvdbench at
// np 2, ResNet-50's gradients (medians of 5 interleaved runs): 14.2-14.6 ms
// at 64 KiB, 14.5 at 256 KiB, 14.6-15.2 at 16 KiB, 15.1-15.2 at 1 MiB, and
// 20-23 ms when every tensor up to the threshold was fused.
const defaultMaxFusedBytes = 64 << 10

func (l *loop) run() {
	var cause error
	defer func() {
		l.closeTimeline(time.Now())
		if cause == nil {
			cause = l.stallErr
		}
		l.r.loopExited(cause)
		l.r.q.close(&shutdownError{cause: cause})
		close(l.r.stopped)
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	next := time.Now()
	for {
		// Sleep until the tick unless a caller waits on names still
		// in flight (see Handle.Wait).
		if d := time.Until(next); d > 0 && !l.r.q.hot() {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-l.r.q.wake:
				// A group of requests arrived: start the cycle now
				// rather than at the tick.
				if !timer.Stop() {
					<-timer.C
				}
			}
		}
		t0 := time.Now()
		stop, err := l.cycle()
		// The next tick counts from the agreement allreduce, where the
		// ranks met, so that their cycles stay in phase and no rank waits
		// in the next agreement for a peer that is still asleep.
		next = l.syncedAt.Add(l.cfg.CycleTime)
		busy := int64(time.Since(t0))
		st := &l.r.stats
		st.cycles.Add(1)
		if l.performed {
			st.active.Add(1)
			st.activeNs.Add(busy)
			if !l.slow {
				st.cached.Add(1)
				st.cachedNs.Add(busy)
			}
		} else {
			st.idleNs.Add(busy)
		}
		if err != nil {
			l.log.Error().Err(err).Msg("Horovod background loop uncaught exception")
			cause = err
			return
		}
		if stop {
			l.log.Debug().Msg("background loop stopping: shutdown requested")
			return
		}
	}
}

func (l *loop) shutdownRequested() bool {
	select {
	case <-l.stopReq:
		return true
	default:
		return false
	}
}

// words wraps a []uint64 in a reusable tensor.
func wordsTensor(t **tensor.Tensor, w []uint64) *tensor.Tensor {
	if *t == nil || (*t).Len() != len(w) || &(*t).Uint64s()[0] != &w[0] {
		*t = tensor.FromUint64(w)
	}
	return *t
}

// cycle runs one negotiation and performs what is ready. It returns true
// when every rank must stop.
func (l *loop) cycle() (bool, error) {
	now := time.Now()
	l.applyTimeline(now) // StartTimeline, StopTimeline (timeline.go)
	if l.tl != nil {
		l.tl.MarkCycle(now)
	}
	l.performed, l.slow = false, false
	defer l.forget()
	l.msgs = l.r.q.pop(l.msgs[:0])
	l.sync.Reset(l.cache.Bits())
	l.hits, l.uncached, l.back, l.hitBits = l.hits[:0], l.uncached[:0], l.back[:0], l.hitBits[:0]
	useCache := l.cache.Capacity() > 0
	for _, e := range l.msgs {
		switch e.req.Type {
		case wire.Join:
			l.joined = true
			l.uncached = append(l.uncached, e)
			continue
		case wire.Barrier:
			l.uncached = append(l.uncached, e)
			continue
		}
		if !useCache {
			l.uncached = append(l.uncached, e)
			continue
		}
		st, bit := l.cache.LookupHint(&e.req, e.bit)
		e.bit = bit
		if st == cache.Hit && len(l.invalid) > 0 && l.invalid[e.req.Name] {
			delete(l.invalid, e.req.Name)
			st = cache.Invalid
		}
		switch st {
		case cache.Hit:
			l.sync.Hit(bit)
			l.hits = append(l.hits, e)
			l.hitBits = append(l.hitBits, bit)
		case cache.Invalid:
			l.sync.MarkInvalid(bit)
			l.uncached = append(l.uncached, e)
		default:
			l.uncached = append(l.uncached, e)
		}
	}
	if l.joined {
		l.sync.HitAll()
	}
	if l.shutdownRequested() || l.stallErr != nil {
		l.sync.SetShutdown()
	}
	if len(l.uncached) > 0 {
		l.sync.SetUncached()
	}
	if l.stall.Enabled() {
		for _, name := range l.stall.StaleCached(now) {
			l.invalid[name] = true
		}
		if l.coord != nil && l.stall.Due(now) {
			if rep, ok := l.stall.Check(now, l.size, l.coord.Pending()); ok {
				if rep.Shutdown {
					l.log.Error().Msg(rep.Message)
					l.stallErr = errors.New("hvd: stall inspector: " + rep.Message)
					l.sync.SetShutdown()
				} else {
					l.log.Warn().Msg(rep.Message)
				}
			}
		}
	}

	// The agreement: one bitwise-AND allreduce, plus an OR when some rank
	// found a cached entry with changed parameters.
	if err := l.com.Allreduce(wordsTensor(&l.syncT, l.sync.Words()), tensor.BitAnd); err != nil {
		return false, fmt.Errorf("cache agreement: %w", err)
	}
	l.syncedAt = time.Now()
	if l.sync.Invalid() {
		if err := l.com.Allreduce(wordsTensor(&l.invT, l.sync.InvalidWords()), tensor.BitOr); err != nil {
			return false, fmt.Errorf("cache invalidation: %w", err)
		}
		l.inv = l.sync.AppendInvalid(l.inv[:0])
		for _, bit := range l.inv {
			l.cache.Erase(bit)
		}
	}
	l.common = l.sync.AppendCommonHits(l.common[:0])
	if n := l.cache.Bits(); len(l.byBit) < n {
		l.byBit = append(l.byBit, make([]*entry, n-len(l.byBit))...)
	}
	for i, e := range l.hits {
		bit := l.hitBits[i]
		if l.sync.IsHit(bit) && l.cache.Has(bit) {
			l.stall.RemoveCached(e.req.Name)
			l.byBit[bit] = e
			continue
		}
		l.back = append(l.back, e)
		l.stall.ObserveCached(e.req.Name, now)
	}
	// The cached responses, and beside each the entry it performs (nil
	// where this rank has joined and submitted nothing): the entries are
	// then taken without looking their names up (see entries).
	l.responses, l.respEnts = l.responses[:0], l.respEnts[:0]
	for _, bit := range l.common {
		if l.cache.Has(bit) {
			l.responses = append(l.responses, *l.cache.Get(bit))
			l.respEnts = append(l.respEnts, l.byBit[bit])
			l.byBit[bit] = nil
		}
	}
	shutdown := l.sync.Shutdown()
	if l.sync.Uncached() {
		l.r.stats.slow.Add(1)
		l.slow = true
		list, err := l.negotiate()
		if err != nil {
			return false, err
		}
		for i := range list.Responses {
			if l.cache.Put(&list.Responses[i]) {
				l.log.Warn().Msg(cache.EvictionWarning)
			}
		}
		l.responses = append(l.responses, list.Responses...)
		for range list.Responses {
			l.respEnts = append(l.respEnts, nil)
		}
		shutdown = shutdown || list.Shutdown
	}
	l.r.q.pushFront(l.back)
	if shutdown {
		// Every rank stops; pending operations fail with ErrShutdown.
		return true, nil
	}
	for k, resp := range l.planner.Plan(l.responses, l.cfg.FusionThreshold) {
		l.performed = true
		l.sources = l.planner.Sources(k)
		if err := l.perform(&resp); err != nil {
			return false, err
		}
	}
	if l.tl != nil {
		if err := l.tl.Flush(); err != nil {
			l.log.Error().Err(err).Msg("timeline")
		}
	}
	return false, nil
}

// forget drops the cycle's references to entries, which hold the callers'
// tensors: the slices are reused, and what they held past the cycle would
// keep memory the callers have let go of alive.
func (l *loop) forget() {
	clear(l.msgs)
	clear(l.hits)
	clear(l.uncached)
	clear(l.back)
	clear(l.respEnts)
	clear(l.ents)
}

// negotiate is the slow path: every rank sends its uncached requests to rank
// 0, which validates them and broadcasts the ordered responses.
func (l *loop) negotiate() (wire.ResponseList, error) {
	if l.checker != nil {
		l.checker.SetCheck(true)
		defer l.checker.SetCheck(false)
	}
	l.reqList.Requests = l.reqList.Requests[:0]
	for _, e := range l.uncached {
		l.reqList.Requests = append(l.reqList.Requests, e.req)
	}
	l.reqList.Shutdown = l.shutdownRequested()
	l.sendBuf = wire.AppendRequestList(l.sendBuf[:0], &l.reqList)
	l.lenMine[0] = int64(len(l.sendBuf))
	if err := l.com.Allgatherv(tensor.FromInt64(l.lenMine), tensor.FromInt64(l.lens), l.ones); err != nil {
		return wire.ResponseList{}, fmt.Errorf("gathering request sizes: %w", err)
	}
	total := 0
	for r, n := range l.lens {
		l.counts[r] = int(n)
		total += int(n)
	}
	send, err := tensor.FromBytes(tensor.Uint8, l.sendBuf)
	if err != nil {
		return wire.ResponseList{}, err
	}
	var recv *tensor.Tensor
	if l.rank == 0 {
		if cap(l.recvBuf) < total {
			l.recvBuf = make([]byte, total)
		}
		if recv, err = tensor.FromBytes(tensor.Uint8, l.recvBuf[:total]); err != nil {
			return wire.ResponseList{}, err
		}
	}
	if err := l.com.Gatherv(send, recv, l.counts, 0); err != nil {
		return wire.ResponseList{}, fmt.Errorf("gathering requests: %w", err)
	}
	var body []byte
	var out wire.ResponseList
	if l.rank == 0 {
		off := 0
		for r := 0; r < l.size; r++ {
			list, err := wire.DecodeRequestList(l.recvBuf[off : off+l.counts[r]])
			if err != nil {
				return out, fmt.Errorf("requests from rank %d: %w", r, err)
			}
			off += l.counts[r]
			if err := l.coord.Add(r, &list); err != nil {
				return out, err
			}
		}
		out = l.coord.Responses()
		now := time.Now()
		for _, ev := range l.coord.Events() {
			switch ev.Kind {
			case negotiate.Started:
				l.stall.Observe(ev.Name, now)
				if l.tl != nil {
					l.tl.NegotiateStart(ev.Name, ev.Type.String(), now)
				}
			case negotiate.RankReady:
				if l.tl != nil {
					l.tl.NegotiateRankReady(ev.Name, int(ev.Rank), now)
				}
			case negotiate.Finished:
				l.stall.Remove(ev.Name)
				if l.tl != nil {
					l.tl.NegotiateEnd(ev.Name, now)
				}
			}
		}
		body = wire.AppendResponseList(l.sendBuf[:0], &out)
		l.sendBuf = body
		l.lenMine[0] = int64(len(body))
	}
	if err := l.com.Bcast(tensor.FromInt64(l.lenMine), 0); err != nil {
		return out, fmt.Errorf("broadcasting response size: %w", err)
	}
	n := int(l.lenMine[0])
	if l.rank != 0 {
		if cap(l.recvBuf) < n {
			l.recvBuf = make([]byte, n)
		}
		body = l.recvBuf[:n]
	}
	bt, err := tensor.FromBytes(tensor.Uint8, body)
	if err != nil {
		return out, err
	}
	if err := l.com.Bcast(bt, 0); err != nil {
		return out, fmt.Errorf("broadcasting responses: %w", err)
	}
	if l.rank != 0 {
		if out, err = wire.DecodeResponseList(body); err != nil {
			return out, fmt.Errorf("responses from rank 0: %w", err)
		}
	}
	return out, nil
}
