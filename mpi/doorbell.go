package mpi

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"
)

// A doorbell lets a patient wait sleep until the ranks on its node have
// joined the collective, instead of spinning and then sleeping on a timer.
//
// The ranks of a node share one page of memory: a counter of arrivals (the
// futex word), a count of sleepers, and one slot per local rank holding how
// many patient collectives that rank has posted on the communicator. Every
// rank posts the same collectives in the same order (MPI's rule for
// collectives on one communicator), so collective k has found every local
// rank once each slot holds k or more. A rank that posts collective k
// stores k in its slot, bumps the arrivals and, when someone sleeps, wakes
// the sleepers (FUTEX_WAKE on the shared word).
//
// A rank that waits for collective k first waits for its local peers:
// without pause for Patience's spin where they have lately arrived close
// to it (bell.spin; there a sleep would add a wake-up to every
// collective), then asleep on the arrivals word until it changes or a cap
// passes. Once every local rank is there:
//   - where every rank of the communicator is on this node, nobody is
//     missing, and the ranks make the blocking collective, which takes a
//     few microseconds with everyone there (bell.await);
//   - else the rank tests the nonblocking collective it posted, as
//     Patience says, for the exchange and the ranks on other nodes
//     (Comm.wait).
//
// So the first rank to arrive spends no CPU while its peers compute, and
// is woken when the last one arrives, rather than noticing it up to one of
// Patience's sleeps later while that rank, the slowest, waits for it.
//
// The memory is a file in /dev/shm (or the temporary directory), created
// by the node's first rank, mapped by every local rank and removed as soon
// as all have mapped it.

// Layout of the shared page: the arrivals word and the sleepers' count on
// the first cache line, each local rank's slot on a line of its own.
const (
	bellArrivals = 0
	bellSleepers = 4
	bellLine     = 64
)

// bellBytes is the size of the shared memory for locals ranks.
func bellBytes(locals int) int { return bellLine * (1 + locals) }

// bellCap is the longest a wait sleeps on the doorbell without testing its
// collective: a local rank that stopped (frozen, or gone without MPI
// noticing) leaves the wait testing at this pace instead of never.
const bellCap = 5 * time.Millisecond

// bellGaps is how many of its latest waits a rank remembers the local
// arrivals of (bell.arrived).
const bellGaps = 9

// bell is one rank's view of its node's doorbell memory.
type bell struct {
	mem    []byte // the shared memory (bellBytes(locals))
	me     int    // this rank's slot
	locals int    // the ranks on this node
	posted uint64 // the collectives this rank has posted
	unmap  func() error
	// whole: every rank of the communicator is on this node, so that a
	// rank that has seen every local rank arrive knows every rank is in
	// the collective (bell.await).
	whole bool
	// gaps: how long after this rank's post the last local rank posted,
	// in the latest waits (a ring of bellGaps, n of them recorded).
	gaps [bellGaps]time.Duration
	n    int
}

// arrived records that the last local rank posted gap after this rank.
func (b *bell) arrived(gap time.Duration) {
	b.gaps[b.n%bellGaps] = gap
	b.n++
}

// spin is how long a wait should test without pause for its local peers
// to arrive before it sleeps on the doorbell: the patience's spin when
// the local ranks have mostly arrived within half that spin of this one in
// the latest waits (ranks that reach each collective together, where a
// sleep would only add a wake-up to every collective), else none (a rank
// that is steadily early, whose spin would be spent for nothing).
func (b *bell) spin(p Patience) time.Duration {
	if b.n == 0 {
		return p.Spin
	}
	var g [bellGaps]time.Duration
	k := copy(g[:], b.gaps[:min(b.n, bellGaps)])
	slices.Sort(g[:k])
	if g[k/2] <= p.Spin/2 {
		return p.Spin
	}
	return 0
}

// newBell views mem (at least bellBytes(locals), zeroed by its creator)
// as the doorbell of locals ranks, this rank's slot being me.
func newBell(mem []byte, me, locals int) (*bell, error) {
	if locals < 1 || me < 0 || me >= locals {
		return nil, fmt.Errorf("mpi: doorbell slot %d of %d ranks", me, locals)
	}
	if len(mem) < bellBytes(locals) {
		return nil, fmt.Errorf("mpi: doorbell memory of %d bytes for %d ranks, want %d", len(mem), locals, bellBytes(locals))
	}
	if uintptr(unsafe.Pointer(&mem[0]))%bellLine != 0 {
		return nil, errors.New("mpi: doorbell memory not aligned to a cache line")
	}
	return &bell{mem: mem, me: me, locals: locals}, nil
}

func (b *bell) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&b.mem[off])) }

func (b *bell) slot(i int) *uint64 { return (*uint64)(unsafe.Pointer(&b.mem[bellLine*(1+i)])) }

// post records that this rank has posted its next collective and wakes the
// local ranks sleeping on the doorbell; it returns the collective's number.
func (b *bell) post() uint64 {
	b.posted++
	atomic.StoreUint64(b.slot(b.me), b.posted)
	atomic.AddUint32(b.word(bellArrivals), 1)
	if atomic.LoadUint32(b.word(bellSleepers)) > 0 {
		futexWake(b.word(bellArrivals))
	}
	return b.posted
}

// here reports whether every local rank has posted collective k.
func (b *bell) here(k uint64) bool {
	for i := range b.locals {
		if atomic.LoadUint64(b.slot(i)) < k {
			return false
		}
	}
	return true
}

// await posts this rank's next collective and returns once every local
// rank has posted it: testing without pause first, for b.spin(p), then
// sleeping on the doorbell. When every rank of the communicator is on
// this node (b.whole), the collective can then be the blocking call:
// everyone is there, so it spins for no one, and it takes a few
// microseconds where a nonblocking one, tested, took 20-50.
func (b *bell) await(p Patience) {
	k, early := b.post(), b.spin(p)
	posted := time.Now()
	for !b.here(k) {
		if time.Since(posted) < early {
			yieldSlice()
			continue
		}
		b.sleep(k, bellCap)
	}
	b.arrived(time.Since(posted))
}

// sleep sleeps until a local rank posts a collective or limit passes,
// unless every local rank has posted collective k. The sleepers' count is
// raised before the arrivals are read, so a rank that posts after that
// read either sees a sleeper and wakes it or changed the word, which the
// futex then finds different and does not sleep on.
func (b *bell) sleep(k uint64, limit time.Duration) {
	atomic.AddUint32(b.word(bellSleepers), 1)
	v := atomic.LoadUint32(b.word(bellArrivals))
	if !b.here(k) {
		futexWait(b.word(bellArrivals), v, limit)
	}
	atomic.AddUint32(b.word(bellSleepers), ^uint32(0))
}

// close unmaps the memory.
func (b *bell) close() error {
	if b == nil || b.unmap == nil {
		return nil
	}
	u := b.unmap
	b.unmap, b.mem = nil, nil
	return u()
}
