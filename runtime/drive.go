package runtime

import (
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/internal/cycle"
	"github.com/gohorovod/gohorovod/runtime/internal/negotiate"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
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

// negotiate is the slow path: every rank sends its uncached requests to rank
// 0, which validates them and broadcasts the ordered responses. The
// exchange is cycle.Negotiation's; this function performs its collectives
// and writes what rank 0's coordinator saw to the timeline.
func (l *loop) negotiate(uncached []int) (*wire.ResponseList, error) {
	if l.checker != nil {
		l.checker.SetCheck(true)
		defer l.checker.SetCheck(false)
	}
	n := l.neg
	n.Begin(l.items, uncached, l.global == nil && l.stopping())
	for st := n.Next(); st != nil; st = n.Next() {
		if err := doStep(l.com, st); err != nil {
			return nil, fmt.Errorf("%s: %w", st.What, err)
		}
		now := time.Now()
		if err := n.Done(now); err != nil {
			return nil, err
		}
		if l.tl == nil {
			continue
		}
		for _, ev := range n.Events() {
			switch ev.Kind {
			case negotiate.Started:
				l.tl.NegotiateStart(ev.Name, ev.Type.String(), now)
			case negotiate.RankReady:
				l.tl.NegotiateRankReady(ev.Name, int(ev.Rank), now)
			case negotiate.Finished:
				l.tl.NegotiateEnd(ev.Name, now)
			}
		}
	}
	return n.Responses(), nil
}
