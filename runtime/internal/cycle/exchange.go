package cycle

import (
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/negotiate"
	"github.com/gohorovod/gohorovod/runtime/internal/stall"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// Op is the kind of collective a Step asks the driver to perform over the
// set's communicator.
type Op int

// The collectives of the exchanges.
const (
	// AllgatherInts gathers every rank's SendInts (one value) into
	// RecvInts on every rank, Counts[r] values from rank r.
	AllgatherInts Op = iota
	// AllgatherBytes gathers every rank's Send into Recv on every rank,
	// Counts[r] bytes from rank r.
	AllgatherBytes
	// GatherBytes gathers every rank's Send into Recv on rank Root (Recv
	// is nil elsewhere), Counts[r] bytes from rank r.
	GatherBytes
	// BcastInts broadcasts rank Root's SendInts to every rank's, in place.
	BcastInts
	// BcastBytes broadcasts rank Root's Send to every rank's, in place.
	BcastBytes
)

// Step is one collective an exchange asks for, with its buffers, which the
// exchange owns. The driver performs it, then calls the exchange's Done;
// when the collective fails it wraps the error with What.
type Step struct {
	Op       Op
	What     string // what the collective does, for errors: "gathering requests"
	SendInts []int64
	RecvInts []int64
	Send     []byte
	Recv     []byte
	Counts   []int
	Root     int
}

// Negotiation is one rank's side of the slow path as steps: every rank
// sends its uncached requests to rank 0 (their sizes, then the bytes),
// whose coordinator validates them and orders the responses, which rank 0
// broadcasts (the size, then the bytes). Begin starts it; the driver then
// performs each Step that Next returns and calls Done, until Next returns
// nil; Responses then holds what every rank performs. The buffers are
// reused from negotiation to negotiation.
type Negotiation struct {
	rank, size int
	coord      *negotiate.Coordinator // rank 0 only
	stall      *stall.Inspector       // rank 0: told which names wait in the coordinator
	phase      int
	list       wire.RequestList
	out        wire.ResponseList
	send, recv []byte
	body       []byte
	mine, lens []int64
	ones       []int
	counts     []int
	events     []negotiate.Event
	step       Step
}

// NewNegotiation returns the negotiation of rank (of size ranks): coord is
// rank 0's coordinator (nil elsewhere), s (which may be nil) rank 0's
// stall inspector, told when a name starts and stops waiting in the
// coordinator.
func NewNegotiation(rank, size int, coord *negotiate.Coordinator, s *stall.Inspector) *Negotiation {
	n := &Negotiation{rank: rank, size: size, coord: coord, stall: s,
		mine: make([]int64, 1), lens: make([]int64, size), ones: make([]int, size), counts: make([]int, size)}
	for i := range n.ones {
		n.ones[i] = 1
	}
	return n
}

// Begin starts a negotiation of this rank's uncached items (the indices
// Decide gave) of items; shutdown says that this rank asks every rank to
// stop.
func (n *Negotiation) Begin(items []Item, uncached []int, shutdown bool) {
	n.list.Requests = n.list.Requests[:0]
	for _, i := range uncached {
		n.list.Requests = append(n.list.Requests, *items[i].Req)
	}
	n.list.Shutdown = shutdown
	n.send = wire.AppendRequestList(n.send[:0], &n.list)
	clear(n.list.Requests) // the callers' requests hold their tensors' names only, but let them go
	n.mine[0] = int64(len(n.send))
	n.out = wire.ResponseList{}
	n.phase = 0
	n.step = Step{Op: AllgatherInts, What: "gathering request sizes", SendInts: n.mine, RecvInts: n.lens, Counts: n.ones}
}

// Next returns the collective to perform next, or nil when the
// negotiation is complete.
func (n *Negotiation) Next() *Step {
	if n.phase > 3 {
		return nil
	}
	return &n.step
}

// Done takes the result of the Step that Next returned (its receive
// buffers filled). now is the time rank 0 judges the requests at. An error
// ends the negotiation: a rank's requests or rank 0's responses that do not
// decode, or the coordinator's refusal.
func (n *Negotiation) Done(now time.Time) error {
	n.events = n.events[:0]
	switch n.phase {
	case 0:
		total := 0
		for r, k := range n.lens {
			n.counts[r] = int(k)
			total += int(k)
		}
		var recv []byte
		if n.rank == 0 {
			if cap(n.recv) < total {
				n.recv = make([]byte, total)
			}
			recv = n.recv[:total]
		}
		n.step = Step{Op: GatherBytes, What: "gathering requests", Send: n.send, Recv: recv, Counts: n.counts}
	case 1:
		if n.rank == 0 {
			off := 0
			for r := 0; r < n.size; r++ {
				list, err := wire.DecodeRequestList(n.recv[off : off+n.counts[r]])
				if err != nil {
					n.phase = 4
					return fmt.Errorf("requests from rank %d: %w", r, err)
				}
				off += n.counts[r]
				if err := n.coord.AddAt(r, &list, now); err != nil {
					n.phase = 4
					return err
				}
			}
			n.out = n.coord.Responses()
			for _, ev := range n.coord.Events() {
				n.events = append(n.events, ev)
				if n.stall == nil {
					continue
				}
				switch ev.Kind {
				case negotiate.Started:
					n.stall.Observe(ev.Name, now)
				case negotiate.Finished:
					n.stall.Remove(ev.Name)
				}
			}
			n.body = wire.AppendResponseList(n.send[:0], &n.out)
			n.send = n.body
			n.mine[0] = int64(len(n.body))
		}
		n.step = Step{Op: BcastInts, What: "broadcasting response size", SendInts: n.mine}
	case 2:
		if n.rank != 0 {
			k := int(n.mine[0])
			if cap(n.recv) < k {
				n.recv = make([]byte, k)
			}
			n.body = n.recv[:k]
		}
		n.step = Step{Op: BcastBytes, What: "broadcasting responses", Send: n.body}
	case 3:
		if n.rank != 0 {
			out, err := wire.DecodeResponseList(n.body)
			if err != nil {
				n.phase = 4
				return fmt.Errorf("responses from rank 0: %w", err)
			}
			n.out = out
		}
	default:
		panic("cycle: Negotiation.Done after the last step")
	}
	n.phase++
	return nil
}

// Responses returns the negotiated responses, once Next has returned nil.
func (n *Negotiation) Responses() *wire.ResponseList { return &n.out }

// Events returns, on rank 0, what the coordinator saw in the step the last
// Done took (names that started or finished waiting, ranks that became
// ready), for the timeline; empty elsewhere. It is valid until the next
// Done.
func (n *Negotiation) Events() []negotiate.Event { return n.events }

// Gather is every rank's bytes gathered on every rank, as steps: the
// sizes, then the bytes. The control exchanges outside the cycle (the
// farewell, the settings and process sets at Init, a dynamic registration)
// use it.
type Gather struct {
	mine  []byte
	lens  []int64
	all   []byte
	ones  []int
	count []int
	phase int
	step  Step
}

// NewGather returns the gather of mine among size ranks.
func NewGather(size int, mine []byte) *Gather {
	g := &Gather{mine: mine, lens: make([]int64, size), ones: make([]int, size)}
	for i := range g.ones {
		g.ones[i] = 1
	}
	g.step = Step{Op: AllgatherInts, SendInts: []int64{int64(len(mine))}, RecvInts: g.lens, Counts: g.ones}
	return g
}

// Next returns the collective to perform next, or nil when every rank's
// bytes are in (see Result).
func (g *Gather) Next() *Step {
	if g.phase > 1 {
		return nil
	}
	return &g.step
}

// Done takes the result of the Step that Next returned.
func (g *Gather) Done() {
	switch g.phase {
	case 0:
		g.count = make([]int, len(g.lens))
		total := 0
		for i, n := range g.lens {
			g.count[i] = int(n)
			total += int(n)
		}
		g.all = make([]byte, total)
		g.step = Step{Op: AllgatherBytes, Send: g.mine, Recv: g.all, Counts: g.count}
	case 1:
	default:
		panic("cycle: Gather.Done after the last step")
	}
	g.phase++
}

// Result returns every rank's bytes, by rank, once Next has returned nil.
func (g *Gather) Result() [][]byte {
	out := make([][]byte, len(g.count))
	off := 0
	for i, n := range g.count {
		out[i] = g.all[off : off+n]
		off += n
	}
	return out
}

// StallAct is what a stall report asks of the loop.
type StallAct int

// The acts of a stall report.
const (
	// StallWarn: log the message as a warning.
	StallWarn StallAct = iota
	// StallStop: the global set's rank 0 stops every rank in this cycle
	// (it sets its shutdown request in the agreement, see State.Stop).
	StallStop
	// StallStopNext: a non-global set's rank 0 has a name waiting past
	// the shutdown time: the global set's next cycle stops every rank.
	StallStopNext
)

// Stalled runs rank 0's stall inspection for the cycle at now, when it is
// due: ok reports that there is something to tell, msg (naming the process
// set when set, its id, is not the global set's 0) and what to do with it.
// It is never ok on other ranks, nor when the inspector is off.
func (n *Negotiation) Stalled(now time.Time, set int) (msg string, act StallAct, ok bool) {
	if n.coord == nil || n.stall == nil || !n.stall.Due(now) {
		return "", StallWarn, false
	}
	rep, ok := n.stall.Check(now, n.size, n.coord.Pending(), n.coord.LastSubmitted())
	if !ok {
		return "", StallWarn, false
	}
	msg = rep.Message
	if set != 0 {
		msg = fmt.Sprintf("process set %d: %s", set, msg)
	}
	switch {
	case rep.Shutdown && set == 0:
		return msg, StallStop, true
	case rep.Shutdown:
		return msg, StallStopNext, true
	}
	return msg, StallWarn, true
}

// CachedProgress tells rank 0's coordinator that every rank submitted
// something at now when a cycle's agreement found cached requests that
// every rank holds (cached is how many: the common hits, the responses the
// cycle replays from the cache), so that the stall inspector does not call
// a rank silent that works on the cache's fast path: in steady state ranks
// send no request lists, and the coordinator sees submissions only here.
//
// It is the one signal rank 0 has: a cached request that some ranks hold
// and others do not shows in no bit vector, and reaches the coordinator only
// when its rank's inspector moves it to negotiation after the warning time
// (see stall.Check, whose silent line therefore says what "nothing"
// covers). It costs one comparison per cycle on rank 0, and nothing on the
// others.
func (n *Negotiation) CachedProgress(now time.Time, cached int) {
	if n.coord != nil && cached > 0 {
		n.coord.TouchAll(now)
	}
}
