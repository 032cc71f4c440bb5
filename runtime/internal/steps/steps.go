// Package steps performs over a communicator the collectives that the pure
// exchanges of runtime/internal/cycle ask for, one Step at a time: the
// negotiation's, the tuning broadcast's, and Gather, every rank's bytes on
// every rank, which the runtime's control exchanges (farewell, knobs,
// process sets, node names) and the transport room (the TCP ring's
// addresses) use alike.
package steps

import (
	"fmt"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/internal/cycle"
	"github.com/gohorovod/gohorovod/tensor"
)

// Do performs over c one collective that an exchange of
// runtime/internal/cycle asks for, in its buffers.
func Do(c comm.Communicator, st *cycle.Step) error {
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
	return fmt.Errorf("steps: unknown exchange step %d", st.Op)
}

// Gather gathers every rank's mine on every rank of c (cycle.Gather:
// the sizes, then the bytes) and returns them by rank. Collective over c.
func Gather(c comm.Communicator, mine []byte) ([][]byte, error) {
	g := cycle.NewGather(c.Size(), mine)
	for st := g.Next(); st != nil; st = g.Next() {
		if err := Do(c, st); err != nil {
			return nil, err
		}
		g.Done()
	}
	return g.Result(), nil
}
