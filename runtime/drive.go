package runtime

import (
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/internal/cache"
	"github.com/gohorovod/gohorovod/runtime/internal/cycle"
	"github.com/gohorovod/gohorovod/tensor"
)

// doStep performs over c one collective that an exchange of
// runtime/internal/cycle asks for, in its buffers.
func doStep(c comm.Communicator, st *cycle.Step) error {
	switch st.Op {
	case cycle.AllgatherInts:
		return c.Allgatherv(tensor.FromInt64(st.SendInts), tensor.FromInt64(st.RecvInts), st.Counts)
	case cycle.BcastInts:
		return c.Bcast(tensor.FromInt64(st.SendInts), st.Root)
	}
	send, err := tensor.FromBytes(tensor.Uint8, st.Send)
	if err != nil {
		return err
	}
	switch st.Op {
	case cycle.AllgatherBytes:
		recv, err := tensor.FromBytes(tensor.Uint8, st.Recv)
		if err != nil {
			return err
		}
		return c.Allgatherv(send, recv, st.Counts)
	case cycle.GatherBytes:
		var recv *tensor.Tensor
		if c.Rank() == st.Root {
			if recv, err = tensor.FromBytes(tensor.Uint8, st.Recv); err != nil {
				return err
			}
		}
		return c.Gatherv(send, recv, st.Counts, st.Root)
	case cycle.BcastBytes:
		return c.Bcast(send, st.Root)
	}
	return fmt.Errorf("hvd: unknown exchange step %d", st.Op)
}

// gatherBytes gathers every rank's mine on every rank of c: the sizes, then
// the bytes.
func gatherBytes(c comm.Communicator, mine []byte) ([][]byte, error) {
	g := cycle.NewGather(c.Size(), mine)
	for st := g.Next(); st != nil; st = g.Next() {
		if err := doStep(c, st); err != nil {
			return nil, err
		}
		g.Done()
	}
	return g.Result(), nil
}

// negotiate is the slow path of a cycle that decided d: every rank sends
// its uncached requests to rank 0, which validates them and broadcasts the
// ordered responses, which are added to d and to the response cache. The
// exchange is cycle.Negotiation's; this function performs its collectives
// and writes what rank 0's coordinator saw to the timeline.
func (l *loop) negotiate(d *cycle.Decision) error {
	l.r.stats.slow.Add(1)
	l.slow = true
	if l.checker != nil {
		l.checker.SetCheck(true)
		defer l.checker.SetCheck(false)
	}
	n := l.neg
	n.Begin(l.cyc.items, d.Uncached, l.global == nil && l.stopping())
	for st := n.Next(); st != nil; st = n.Next() {
		if err := doStep(l.com, st); err != nil {
			return fmt.Errorf("%s: %w", st.What, err)
		}
		now := time.Now()
		if err := n.Done(now); err != nil {
			return err
		}
		l.tl.negotiation(n.Events(), now)
	}
	list := n.Responses()
	if l.st.Negotiated(list) {
		l.log.Warn().Msg(cache.EvictionWarning(int(l.cfg.CacheCapacity)))
	}
	if l.log.Debug().Enabled() {
		l.log.logNegotiated(len(d.Uncached), list, l.st.Cache())
	}
	for range list.Responses {
		l.cyc.respEnts = append(l.cyc.respEnts, nil)
	}
	return nil
}
