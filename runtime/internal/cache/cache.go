package cache

import (
	"slices"
	"strconv"
	"unsafe"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// State is the result of looking a request up in the cache.
type State uint8

// The lookup results.
const (
	Miss    State = iota // the name is not cached
	Hit                  // cached with the same parameters
	Invalid              // cached with different parameters: must be erased everywhere
)

// String implements fmt.Stringer.
func (s State) String() string {
	switch s {
	case Hit:
		return "hit"
	case Invalid:
		return "invalid"
	}
	return "miss"
}

// EvictionWarning is what is logged once when a cache of the given
// capacity first evicts a response (Horovod's text, which names the
// capacity configured).
func EvictionWarning(capacity int) string {
	return "A response has been evicted from cache which may indicate reduced performance. Better performance may be obtained by disabling caching (HOROVOD_CACHE_CAPACITY=0) or increasing the cache capacity (HOROVOD_CACHE_CAPACITY>" +
		strconv.Itoa(capacity) + ")."
}

type entry struct {
	resp       wire.Response // a single-tensor response
	used       bool
	prev, next int // LRU list links (-1: none)
}

// Cache is an LRU cache of single-tensor responses with a bit per entry.
// The zero value is a disabled cache (capacity 0); use New.
type Cache struct {
	capacity   int
	rank       int
	entries    []entry // indexed by bit
	byName     map[string]int
	head, tail int   // least and most recently used bit, -1 when empty
	free       []int // unused bits below len(entries), ascending
	n          int
	evicted    bool
	evictions  int // since the last call to Evictions
}

// New returns a cache holding at most capacity responses, for the given
// rank (whose own first dimension an allgather hit must match).
func New(capacity, rank int) *Cache {
	return &Cache{capacity: capacity, rank: rank, byName: make(map[string]int), head: -1, tail: -1}
}

// Capacity returns the most entries the cache holds; 0 means disabled.
func (c *Cache) Capacity() int { return c.capacity }

// Len returns the number of cached responses.
func (c *Cache) Len() int { return c.n }

// Bits returns the number of bit positions in use: every cached bit is
// below it. Identical on all ranks.
func (c *Cache) Bits() int { return len(c.entries) }

// Cacheable reports whether responses of type t are cached (Horovod caches
// allreduce, adasum and allgather; broadcast, reducescatter, barrier and join
// never; alltoall is left out here because its splits are not negotiated).
func Cacheable(t wire.ResponseType) bool {
	switch wire.RequestType(t) {
	case wire.Allreduce, wire.Adasum, wire.Allgather:
		return true
	}
	return false
}

// Lookup classifies a request against the cache and returns its bit when it
// is cached (Hit or Invalid).
func (c *Cache) Lookup(req *wire.Request) (State, int) {
	bit, ok := c.byName[req.Name]
	if !ok {
		return Miss, -1
	}
	if c.matches(&c.entries[bit].resp, req) {
		return Hit, bit
	}
	return Invalid, bit
}

// LookupHint is Lookup for a request whose bit was hint when last looked
// up: when the hint still holds the same name, no hashing is needed. Any
// hint is safe (a stale or invalid one falls back to Lookup).
func (c *Cache) LookupHint(req *wire.Request, hint int) (State, int) {
	if hint < 0 || hint >= len(c.entries) || !c.entries[hint].used {
		return c.Lookup(req)
	}
	r := &c.entries[hint].resp
	if name := r.Names[0]; unsafe.StringData(name) != unsafe.StringData(req.Name) {
		if name != req.Name {
			return c.Lookup(req)
		}
		// Keep the request's copy of the name (the entry's Names is its
		// own): the next comparison, here and by the caller, is then
		// of one pointer, not of the bytes.
		r.Names[0] = req.Name
	}
	if c.matches(r, req) {
		return Hit, hint
	}
	return Invalid, hint
}

func (c *Cache) matches(r *wire.Response, req *wire.Request) bool {
	if wire.RequestType(r.Type) != req.Type || r.DType != req.DType || r.Op != req.Op ||
		r.Prescale != req.Prescale || r.Postscale != req.Postscale {
		return false
	}
	if c.rank < len(r.Devices) && r.Devices[c.rank] != req.Device {
		return false
	}
	shape := r.Shapes[0]
	if req.Type == wire.Allgather {
		return len(req.Shape) == len(shape) && len(req.Shape) > 0 && c.rank < len(r.Sizes) &&
			req.Shape[0] == r.Sizes[c.rank] && slices.Equal(req.Shape[1:], shape[1:])
	}
	return slices.Equal(req.Shape, shape)
}

// Put caches the responses of one performed operation, split per tensor
// when it was fused. Responses of types that are not Cacheable are ignored.
// It reports whether an entry had to be evicted for the first time (the
// caller logs EvictionWarning).
func (c *Cache) Put(resp *wire.Response) (firstEviction bool) {
	if c.capacity <= 0 || !Cacheable(resp.Type) {
		return false
	}
	ranks := len(resp.Devices)
	for i, name := range resp.Names {
		one := wire.Response{Type: resp.Type, Names: []string{name}, Devices: resp.Devices, DType: resp.DType,
			Prescale: resp.Prescale, Postscale: resp.Postscale, Op: resp.Op, Shapes: [][]int64{resp.Shapes[i]}}
		if wire.RequestType(resp.Type) == wire.Allgather {
			one.Sizes = resp.Sizes[i*ranks : (i+1)*ranks]
		} else {
			one.Sizes = resp.Sizes[i : i+1]
		}
		if c.put(one) {
			firstEviction = true
		}
	}
	return firstEviction
}

func (c *Cache) put(r wire.Response) bool {
	name := r.Names[0]
	if bit, ok := c.byName[name]; ok {
		c.entries[bit].resp = r
		c.touch(bit)
		return false
	}
	first := false
	if c.n >= c.capacity {
		first = !c.evicted
		c.evicted = true
		c.evictions++
		c.Erase(c.head)
	}
	var bit int
	if len(c.free) > 0 {
		bit = c.free[0]
		c.free = c.free[1:]
	} else {
		bit = len(c.entries)
		c.entries = append(c.entries, entry{})
	}
	c.entries[bit] = entry{resp: r, used: true, prev: -1, next: -1}
	c.byName[name] = bit
	c.n++
	c.pushBack(bit)
	return first
}

// Evictions returns the number of responses evicted to make room since the
// last call (for the runtime's debug log), and starts counting again.
func (c *Cache) Evictions() int {
	n := c.evictions
	c.evictions = 0
	return n
}

// Get returns the cached response for bit and marks it most recently used.
// Every rank calls it for the same bits in the same order.
func (c *Cache) Get(bit int) *wire.Response {
	c.touch(bit)
	return &c.entries[bit].resp
}

// Peek returns the cached response for bit without touching the LRU order.
func (c *Cache) Peek(bit int) *wire.Response { return &c.entries[bit].resp }

// Has reports whether bit holds a response.
func (c *Cache) Has(bit int) bool { return bit >= 0 && bit < len(c.entries) && c.entries[bit].used }

// BitOf returns the bit of a cached name.
func (c *Cache) BitOf(name string) (int, bool) {
	b, ok := c.byName[name]
	return b, ok
}

// Erase removes the response at bit; its bit becomes free for reuse, the
// lowest free bit first.
func (c *Cache) Erase(bit int) {
	if !c.Has(bit) {
		return
	}
	c.unlink(bit)
	delete(c.byName, c.entries[bit].resp.Names[0])
	c.entries[bit] = entry{prev: -1, next: -1}
	c.n--
	i, _ := slices.BinarySearch(c.free, bit)
	c.free = slices.Insert(c.free, i, bit)
	// Trim trailing free bits so that the vector stays short.
	for len(c.entries) > 0 && !c.entries[len(c.entries)-1].used {
		last := len(c.entries) - 1
		c.entries = c.entries[:last]
		if j, ok := slices.BinarySearch(c.free, last); ok {
			c.free = slices.Delete(c.free, j, j+1)
		}
	}
}

func (c *Cache) touch(bit int) {
	if c.tail == bit {
		return
	}
	c.unlink(bit)
	c.pushBack(bit)
}

func (c *Cache) unlink(bit int) {
	e := &c.entries[bit]
	if e.prev >= 0 {
		c.entries[e.prev].next = e.next
	} else {
		c.head = e.next
	}
	if e.next >= 0 {
		c.entries[e.next].prev = e.prev
	} else {
		c.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

func (c *Cache) pushBack(bit int) {
	e := &c.entries[bit]
	e.prev, e.next = c.tail, -1
	if c.tail >= 0 {
		c.entries[c.tail].next = bit
	} else {
		c.head = bit
	}
	c.tail = bit
}

// LRU returns the cached bits from least to most recently used.
func (c *Cache) LRU() []int {
	var out []int
	for b := c.head; b >= 0; b = c.entries[b].next {
		out = append(out, b)
	}
	return out
}
