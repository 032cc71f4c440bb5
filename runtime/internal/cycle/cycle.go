package cycle

import (
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/cache"
	"github.com/gohorovod/gohorovod/runtime/internal/stall"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// Item is one request popped from this rank's queue for the cycle.
type Item struct {
	Req *wire.Request
	// Bit is the cache bit the request was found at last (a hint, -1
	// when none); Begin updates it, and the caller keeps it for the next
	// cycle.
	Bit int
}

// None marks a response that no item of this rank performs (this rank has
// joined, or the response came from negotiation: look its names up).
const None = -1

// Decision is what the ranks agreed on for one cycle, as seen by one rank.
type Decision struct {
	// Responses are the operations to perform, in order: the cached ones
	// (ascending cache bit), then, after Negotiated, negotiation's.
	Responses []wire.Response
	// Items holds, for each response, the index of the item it performs
	// when known (cached responses of this rank's own requests), or None.
	Items []int
	// Bits holds the cache bit of each cached response (before
	// Negotiated adds negotiation's, which have none), in order: every
	// rank's are alike.
	Bits []int
	// Back lists the items to return to the head of the queue, in order:
	// cached requests that some other rank has not submitted yet.
	Back []int
	// Uncached lists the items to send to negotiation, in order.
	Uncached []int
	// Negotiate is true when some rank has uncached requests: every rank
	// then negotiates (the slow path).
	Negotiate bool
	// Shutdown is true when some rank asked every rank to stop.
	Shutdown bool
	// AllJoined is true when every rank has joined: no cached response
	// is replayed.
	AllJoined bool
}

// State is one rank's cycle state: the response cache, the join flag, the
// cached names forced through negotiation, and the buffers reused from
// cycle to cycle. Use New.
type State struct {
	cache   *cache.Cache
	stall   *stall.Inspector
	sync    cache.Sync
	joined  bool
	invalid map[string]bool // cached names to force through negotiation

	items                      []Item
	hits, hitBits, common, inv []int
	byBit                      []int // item index + 1 of this cycle's common hits, by bit
	d                          Decision
	began, agreed, decided     bool
}

// New returns the state of a rank whose response cache is c; s (which may
// be nil) is the rank's stall inspector, told which cached requests wait.
func New(c *cache.Cache, s *stall.Inspector) *State {
	return &State{cache: c, stall: s, invalid: make(map[string]bool)}
}

// SetCache replaces the rank's response cache with c (capacity 0: no
// cache) between cycles: after a cycle's Decide (and Negotiated), before
// the next Begin. Every rank must replace its cache at the same cycle (the
// autotuner switches the cache on and off so): the caches then stay alike.
// The requests forced through negotiation are forgotten with the entries.
func (s *State) SetCache(c *cache.Cache) {
	s.cache = c
	clear(s.invalid)
}

// Cache returns the rank's response cache.
func (s *State) Cache() *cache.Cache { return s.cache }

// Joined reports whether this rank has joined and not yet been released by
// a Join response: it then contributes zeros to allreduces it did not
// submit.
func (s *State) Joined() bool { return s.joined }

// Unjoin records that the Join response was performed.
func (s *State) Unjoin() { s.joined = false }

// Invalidate forces the cached request name through full negotiation the
// next time it is submitted (the stall inspector uses it so that the
// coordinator sees requests that wait on other ranks).
func (s *State) Invalidate(name string) { s.invalid[name] = true }

// joinable reports whether a joined rank can take part in a cached
// response of type t without having submitted it (contributing zeros).
func joinable(t wire.ResponseType) bool {
	switch wire.RequestType(t) {
	case wire.Allreduce, wire.Adasum:
		return true
	}
	return false
}

// Begin starts a cycle: it classifies the popped items against the cache
// (updating their bits) and returns this rank's agreement vector, to be
// combined with every rank's by a bitwise AND, in place. shutdown says that
// this rank asks every rank to stop. items must stay unchanged until the
// cycle's Decide.
func (s *State) Begin(items []Item, shutdown bool) []uint64 {
	s.items = items
	s.began, s.agreed, s.decided = true, false, false
	c := s.cache
	s.sync.Reset(c.Bits())
	s.hits, s.hitBits = s.hits[:0], s.hitBits[:0]
	d := &s.d
	d.Uncached, d.Back = d.Uncached[:0], d.Back[:0]
	useCache := c.Capacity() > 0
	for i := range items {
		it := &items[i]
		switch it.Req.Type {
		case wire.Join:
			s.joined = true
			d.Uncached = append(d.Uncached, i)
			continue
		case wire.Barrier:
			d.Uncached = append(d.Uncached, i)
			continue
		}
		if !useCache {
			d.Uncached = append(d.Uncached, i)
			continue
		}
		st, bit := c.LookupHint(it.Req, it.Bit)
		it.Bit = bit
		if st == cache.Hit && len(s.invalid) > 0 && s.invalid[it.Req.Name] {
			delete(s.invalid, it.Req.Name)
			st = cache.Invalid
		}
		switch st {
		case cache.Hit:
			s.sync.Hit(bit)
			s.hits = append(s.hits, i)
			s.hitBits = append(s.hitBits, bit)
		case cache.Invalid:
			s.sync.MarkInvalid(bit)
			d.Uncached = append(d.Uncached, i)
		default:
			d.Uncached = append(d.Uncached, i)
		}
	}
	if s.joined {
		// A joined rank agrees to every cached allreduce, contributing
		// zeros. It cannot take part in the other cached types (an
		// allgather of rows it does not have): Horovod rejects them
		// while a rank is joined, so their entries are erased on every
		// rank, and a rank that submits one again goes through
		// negotiation, which answers with that error.
		for bit := 0; bit < c.Bits(); bit++ {
			if !c.Has(bit) {
				continue
			}
			if joinable(c.Peek(bit).Type) {
				s.sync.Hit(bit)
			} else {
				s.sync.MarkInvalid(bit)
			}
		}
		s.sync.SetJoined()
	}
	if shutdown {
		s.sync.SetShutdown()
	}
	if len(d.Uncached) > 0 {
		s.sync.SetUncached()
	}
	return s.sync.Words()
}

// Agreed is called once the vector Begin returned holds the AND of every
// rank's. It returns, when some rank found an invalid cache entry, this
// rank's invalid-bit vector, to be combined by a bitwise OR in place
// before Decide; otherwise nil.
func (s *State) Agreed() []uint64 {
	if !s.began {
		panic("cycle: Agreed before Begin")
	}
	s.agreed = true
	if s.sync.Invalid() {
		return s.sync.InvalidWords()
	}
	return nil
}

// Decide erases the invalid entries (when Agreed asked for an OR) and
// returns the cycle's decision: the cached responses every rank performs,
// the items to return to the queue, and whether to negotiate. now is the
// time the requests are judged at (for the stall inspector). The decision
// and its slices are reused by the next cycle.
func (s *State) Decide(now time.Time) *Decision {
	if !s.agreed {
		panic("cycle: Decide before Agreed")
	}
	s.decided = true
	c := s.cache
	d := &s.d
	if s.sync.Invalid() {
		s.inv = s.sync.AppendInvalid(s.inv[:0])
		for _, bit := range s.inv {
			c.Erase(bit)
		}
	}
	d.AllJoined = s.sync.AllJoined()
	s.common = s.sync.AppendCommonHits(s.common[:0])
	if n := c.Bits(); len(s.byBit) < n {
		s.byBit = append(s.byBit, make([]int, n-len(s.byBit))...)
	}
	for k, i := range s.hits {
		bit := s.hitBits[k]
		name := s.items[i].Req.Name
		if !d.AllJoined && s.sync.IsHit(bit) && c.Has(bit) {
			if s.stall != nil {
				s.stall.RemoveCached(name)
			}
			s.byBit[bit] = i + 1
			continue
		}
		d.Back = append(d.Back, i)
		if s.stall != nil {
			s.stall.ObserveCached(name, now)
		}
	}
	d.Responses, d.Items, d.Bits = d.Responses[:0], d.Items[:0], d.Bits[:0]
	if !d.AllJoined {
		for _, bit := range s.common {
			if c.Has(bit) {
				d.Responses = append(d.Responses, *c.Get(bit))
				d.Items = append(d.Items, s.byBit[bit]-1)
				d.Bits = append(d.Bits, bit)
				s.byBit[bit] = 0
			}
		}
	}
	d.Shutdown = s.sync.Shutdown()
	d.Negotiate = s.sync.Uncached()
	return d
}

// Negotiated adds negotiation's responses to the decision (after the
// cached ones) and to the cache. It reports whether an entry was evicted
// from the cache for the first time (log cache.EvictionWarning then).
func (s *State) Negotiated(list *wire.ResponseList) (firstEviction bool) {
	if !s.decided {
		panic("cycle: Negotiated before Decide")
	}
	d := &s.d
	for i := range list.Responses {
		if s.cache.Put(&list.Responses[i]) {
			firstEviction = true
		}
	}
	d.Responses = append(d.Responses, list.Responses...)
	for range list.Responses {
		d.Items = append(d.Items, None)
	}
	d.Shutdown = d.Shutdown || list.Shutdown
	return firstEviction
}

// StaleCached forces through negotiation the cached requests that have
// waited on other ranks longer than the stall inspector's warning time, so
// that the coordinator sees them and can name the missing ranks.
func (s *State) StaleCached(now time.Time) {
	if s.stall == nil || !s.stall.Enabled() {
		return
	}
	for _, name := range s.stall.StaleCached(now) {
		s.invalid[name] = true
	}
}

// Stop sets this rank's shutdown request in the vector Begin returned,
// before the AND (the stall inspector decided to stop the job).
func (s *State) Stop() { s.sync.SetShutdown() }
