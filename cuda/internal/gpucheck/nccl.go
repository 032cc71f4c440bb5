package gpucheck

import (
	"bytes"
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/tensor"
)

// CheckNCCL makes a one-rank communicator on g's device and checks, for
// every dtype, that allreduce (each reduction, in and out of place),
// allgather, broadcast, reducescatter and alltoall deliver the input (the
// result of every collective at one rank), and that bitwise reductions are
// refused. It returns the timing of a float32 allreduce of allreduceBytes.
func CheckNCCL(n *cuda.NCCL, g *cuda.GPU, allreduceBytes, iters int) (res Result, err error) {
	id, err := n.UniqueID()
	if err != nil {
		return res, err
	}
	c, err := n.NewComm(g.Ordinal(), 1, 0, id)
	if err != nil {
		return res, err
	}
	defer func() {
		if derr := c.Destroy(); derr != nil && err == nil {
			err = derr
		}
	}()
	s := g.Stream()
	for _, dt := range tensor.DTypes() {
		if _, err := cuda.NCCLType(dt); err != nil {
			continue // no such NCCL type (int16, uint16): the runtime does not use NCCL for it
		}
		if err := checkNCCLType(c, g, dt); err != nil {
			return res, err
		}
	}
	buf, err := g.Alloc(allreduceBytes)
	if err != nil {
		return res, err
	}
	defer func() {
		if ferr := g.Free(buf); ferr != nil && err == nil {
			err = ferr
		}
	}()
	t, err := timeIt(g, iters, func() error { return c.AllReduce(buf, buf, allreduceBytes/4, tensor.Float32, tensor.Sum, s) })
	if err != nil {
		return res, err
	}
	return result("NCCL allreduce float32, 1 rank", int64(allreduceBytes), 1, t), nil
}

// elapsed formats a duration for the report.
func elapsed(d time.Duration) string { return d.Round(time.Millisecond).String() }

// checkNCCLType checks every collective of the one-rank communicator c on
// a thousand values of dtype dt, and that a bitwise reduction is refused.
func checkNCCLType(c *cuda.Comm, g *cuda.GPU, dt tensor.DType) (err error) {
	const count = 1000
	s := g.Stream()
	nb := count * dt.Size()
	in := make([]byte, nb)
	pattern(in, int(dt))
	send, err := g.Alloc(nb)
	if err != nil {
		return err
	}
	defer func() {
		if ferr := g.Free(send); ferr != nil && err == nil {
			err = ferr
		}
	}()
	recv, err := g.Alloc(nb)
	if err != nil {
		return err
	}
	defer func() {
		if ferr := g.Free(recv); ferr != nil && err == nil {
			err = ferr
		}
	}()
	// check runs a collective on send's copy of in and compares what it
	// left at at with in.
	check := func(what string, run func() error, at uintptr) error {
		if err := g.Memset(recv, 0, nb); err != nil {
			return err
		}
		if err := g.CopyHtoD(send, in); err != nil {
			return err
		}
		if err := run(); err != nil {
			return fmt.Errorf("%s %v: %w", what, dt, err)
		}
		out := make([]byte, nb)
		if err := g.CopyDtoH(out, at); err != nil {
			return err
		}
		if err := g.Sync(); err != nil {
			return err
		}
		if err := c.AsyncError(); err != nil {
			return err
		}
		if !bytes.Equal(out, in) {
			return fmt.Errorf("%s %v at one rank: result differs from the input", what, dt)
		}
		return nil
	}
	for _, op := range []tensor.ReduceOp{tensor.Sum, tensor.Min, tensor.Max, tensor.Product} {
		if err := check("allreduce "+op.String(), func() error { return c.AllReduce(send, recv, count, dt, op, s) }, recv); err != nil {
			return err
		}
	}
	if err := check("allreduce in place", func() error { return c.AllReduce(send, send, count, dt, tensor.Sum, s) }, send); err != nil {
		return err
	}
	if err := check("allgather", func() error { return c.AllGather(send, recv, count, dt, s) }, recv); err != nil {
		return err
	}
	if err := check("broadcast", func() error { return c.Broadcast(send, recv, count, dt, 0, s) }, recv); err != nil {
		return err
	}
	if err := check("reducescatter", func() error { return c.ReduceScatter(send, recv, count, dt, tensor.Sum, s) }, recv); err != nil {
		return err
	}
	if err := check("alltoall", func() error { return c.AllToAll(send, []int{count}, recv, []int{count}, dt, s) }, recv); err != nil {
		return err
	}
	if err := c.AllReduce(send, recv, count, dt, tensor.BitOr, s); err == nil {
		return fmt.Errorf("allreduce bor %v: NCCL accepted a bitwise reduction", dt)
	}
	return nil
}
