package negotiate

import (
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// JoinName and BarrierName are the fixed names of the Join and Barrier
// requests (Horovod's JOIN_TENSOR_NAME and BARRIER_TENSOR_NAME).
const (
	JoinName    = "join.noname"
	BarrierName = "barrier.noname"
)

// pending is the table entry of one name: the requests received so far, one
// per rank at most.
type pending struct {
	reqs  []wire.Request
	ranks []bool
}

// Coordinator counts requests per name across the ranks of a group.
// Its zero value is not usable; call New.
type Coordinator struct {
	size       int
	table      map[string]*pending
	order      []string // names in order of first arrival, still pending
	ready      []string // names ready this cycle, in readiness order
	joined     []bool
	joinedN    int
	lastJoined int32
	shutdown   bool
	// When each rank last submitted a request (AddAt), and when every rank
	// last did (TouchAll), for the stall inspector's diagnosis.
	last    []time.Time
	lastAll time.Time
	// Events, for the timeline: first arrival and each rank's arrival.
	events []Event
}

// EventKind says what an Event records.
type EventKind uint8

// The negotiation events.
const (
	Started   EventKind = iota // the first rank submitted the name
	RankReady                  // one rank submitted the name
	Finished                   // every (non-joined) rank has submitted it
)

// Event records a step of one name's negotiation, for the timeline.
type Event struct {
	Kind EventKind
	Name string
	Type wire.RequestType
	Rank int32
}

// New returns a coordinator for a group of size ranks.
func New(size int) *Coordinator {
	if size < 1 {
		panic("negotiate: group size must be positive")
	}
	return &Coordinator{size: size, table: make(map[string]*pending), joined: make([]bool, size), lastJoined: -1,
		last: make([]time.Time, size)}
}

// Size returns the number of ranks in the group.
func (c *Coordinator) Size() int { return c.size }

// JoinedCount returns how many ranks have joined and not yet been released
// by a Join response.
func (c *Coordinator) JoinedCount() int { return c.joinedN }

// Pending returns, for each name still waiting for some rank, the ranks that
// have submitted it; the stall inspector reads it.
func (c *Coordinator) Pending() map[string][]int {
	out := make(map[string][]int, len(c.table))
	for name, p := range c.table {
		var rs []int
		for r, ok := range p.ranks {
			if ok {
				rs = append(rs, r)
			}
		}
		out[name] = rs
	}
	return out
}

// Add records the request list of one rank. Requests whose name becomes
// ready (submitted by every rank that has not joined) are queued for the next
// Responses call in readiness order. A rank number outside the group is an
// error; so is a request whose Rank field differs from rank.
func (c *Coordinator) Add(rank int, l *wire.RequestList) error {
	if rank < 0 || rank >= c.size {
		return fmt.Errorf("negotiate: request list from rank %d in a group of %d", rank, c.size)
	}
	if l.Shutdown {
		c.shutdown = true
	}
	for i := range l.Requests {
		req := &l.Requests[i]
		if int(req.Rank) != rank {
			return fmt.Errorf("negotiate: rank %d sent a request for %q marked rank %d", rank, req.Name, req.Rank)
		}
		if req.Type == wire.Join {
			if !c.joined[rank] {
				c.joined[rank] = true
				c.joinedN++
			}
			c.lastJoined = int32(rank)
			// Names that waited only for ranks that have now joined are ready.
			for _, name := range c.order {
				p := c.table[name]
				if p != nil && c.count(p) == c.size-c.joinedN {
					c.markReady(name)
				}
			}
			continue
		}
		p := c.table[req.Name]
		if p == nil {
			p = &pending{ranks: make([]bool, c.size)}
			c.table[req.Name] = p
			c.order = append(c.order, req.Name)
			c.events = append(c.events, Event{Kind: Started, Name: req.Name, Type: req.Type, Rank: req.Rank})
		}
		if p.ranks[rank] {
			return fmt.Errorf("negotiate: rank %d submitted %q twice", rank, req.Name)
		}
		p.ranks[rank] = true
		p.reqs = append(p.reqs, *req)
		c.events = append(c.events, Event{Kind: RankReady, Name: req.Name, Type: req.Type, Rank: req.Rank})
		if c.count(p) == c.size-c.joinedN {
			c.markReady(req.Name)
		}
	}
	return nil
}

// AddAt is Add for a request list received at now: when the list holds at
// least one request, now is recorded as the rank's last submission (see
// LastSubmitted). The coordinator reads no clock; the caller says when.
func (c *Coordinator) AddAt(rank int, l *wire.RequestList, now time.Time) error {
	if err := c.Add(rank, l); err != nil {
		return err
	}
	if len(l.Requests) > 0 {
		c.last[rank] = now
	}
	return nil
}

// TouchAll records that every rank submitted something at now, learnt
// outside negotiation: in steady state the ranks agree on cached requests
// with one bitwise AND and send no request lists, and a cached request that
// every rank agreed on is a submission by every rank. It costs the same for
// any group size, so the runtime may call it on every cached cycle.
func (c *Coordinator) TouchAll(now time.Time) {
	if now.After(c.lastAll) {
		c.lastAll = now
	}
}

// LastSubmitted returns, per rank, when it last submitted a request as far
// as the coordinator knows (AddAt, TouchAll); the zero time if never. The
// slice is a copy.
func (c *Coordinator) LastSubmitted() []time.Time {
	out := make([]time.Time, c.size)
	for r, t := range c.last {
		if c.lastAll.After(t) {
			t = c.lastAll
		}
		out[r] = t
	}
	return out
}

// count returns how many ranks that have not joined have submitted p; the
// name is ready when that is every rank that has not joined.
func (c *Coordinator) count(p *pending) int {
	n := 0
	for r, ok := range p.ranks {
		if ok && !c.joined[r] {
			n++
		}
	}
	return n
}

func (c *Coordinator) markReady(name string) {
	for _, n := range c.ready {
		if n == name {
			return
		}
	}
	c.ready = append(c.ready, name)
}

// Events returns and clears the negotiation events recorded since the last
// call.
func (c *Coordinator) Events() []Event {
	ev := c.events
	c.events = nil
	return ev
}

// Shutdown reports whether some rank asked for shutdown.
func (c *Coordinator) Shutdown() bool { return c.shutdown }

// Responses returns the responses for every name that became ready since the
// last call, in readiness order, followed by a Join response when every rank
// has joined. The names leave the table. Validation errors become Error
// responses naming the tensor.
func (c *Coordinator) Responses() wire.ResponseList {
	var out wire.ResponseList
	out.Shutdown = c.shutdown
	for _, name := range c.ready {
		p := c.table[name]
		delete(c.table, name)
		out.Responses = append(out.Responses, c.construct(name, p.reqs))
		c.events = append(c.events, Event{Kind: Finished, Name: name, Type: p.reqs[0].Type})
	}
	if len(c.ready) > 0 {
		kept := c.order[:0]
		for _, n := range c.order {
			if _, ok := c.table[n]; ok {
				kept = append(kept, n)
			}
		}
		c.order = kept
	}
	c.ready = c.ready[:0]
	if c.joinedN == c.size {
		out.Responses = append(out.Responses, wire.Response{Type: wire.ResponseType(wire.Join),
			Names: []string{JoinName}, LastJoinedRank: c.lastJoined})
		for r := range c.joined {
			c.joined[r] = false
		}
		c.joinedN = 0
		c.lastJoined = -1
	}
	return out
}
