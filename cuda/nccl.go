package cuda

import (
	"fmt"
	"runtime"

	"github.com/gohorovod/gohorovod/tensor"
)

// UniqueID is an ncclUniqueId: 128 opaque bytes that name one communicator.
// Rank 0 obtains it with NCCL.UniqueID and every rank passes the same bytes
// to NCCL.NewComm; moving it between processes is the caller's job (the
// runtime broadcasts it over the host communicator).
type UniqueID [128]byte

// NCCL is a loaded NCCL library, bound to the CUDA runtime it is used with.
type NCCL struct {
	api     ncclAPI
	rt      *Runtime
	path    string
	version Version
}

// OpenNCCL loads NCCL as cfg says (uncached; LoadNCCL is the cached,
// environment-configured entry point). NCCL 2.7 or later is required
// (ncclSend/ncclRecv); bfloat16 needs 2.10.
func OpenNCCL(rt *Runtime, cfg LoadConfig) (*NCCL, error) {
	if !dlopenSupported {
		return nil, ErrNoDlopen
	}
	l := systemLoader()
	syms := l.ncclSymbols()
	spec := libSpec{what: "NCCL", env: EnvNCCLPath, names: ncclNames, symbols: syms,
		optional: map[string]bool{ncclOptionalSymbolGetLastError: true}}
	o, err := openLib(l, spec, cfg.NCCLPath, cfg.NCCLDirs)
	if err != nil {
		return nil, err
	}
	return newNCCL(newNCCLAPI(rt.api, o.syms), rt, o.path)
}

func newNCCL(api ncclAPI, rt *Runtime, path string) (*NCCL, error) {
	v, code := api.version()
	if err := ncclErr(api, 0, code, "ncclGetVersion"); err != nil {
		return nil, err
	}
	n := &NCCL{api: api, rt: rt, path: path, version: NCCLVersion(v)}
	if ncclCode(n.version) < ncclMinVersionSendRecv {
		return nil, &LoadError{Library: "NCCL", EnvVar: EnvNCCLPath, Attempts: []Attempt{{Path: path,
			Err: fmt.Errorf("NCCL %v is too old: 2.7 or later is needed", n.version)}}}
	}
	return n, nil
}

// Version returns NCCL's version (ncclGetVersion).
func (n *NCCL) Version() Version { return n.version }

// Path returns the file NCCL was loaded from.
func (n *NCCL) Path() string { return n.path }

// Runtime returns the CUDA runtime NCCL is used with.
func (n *NCCL) Runtime() *Runtime { return n.rt }

// UniqueID creates a new communicator id (ncclGetUniqueId). Call it on one
// rank only and share the bytes.
func (n *NCCL) UniqueID() (UniqueID, error) {
	id, code := n.api.uniqueID()
	return id, ncclErr(n.api, 0, code, "ncclGetUniqueId")
}

// Comm is one rank's NCCL communicator, bound to one device. Collectives
// are queued on a stream and complete when the stream is synchronised.
// Every rank must issue the same collectives in the same order.
type Comm struct {
	n    *NCCL
	h    uintptr
	dev  int
	rank int
	size int
}

// NewComm joins rank (of nranks) to the communicator named by id, on device
// dev (ncclCommInitRank). It blocks until all nranks ranks have joined.
func (n *NCCL) NewComm(dev, nranks, rank int, id UniqueID) (*Comm, error) {
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("cuda: NewComm: rank %d of %d is out of range", rank, nranks)
	}
	h, cudaCode, code := n.api.commInitRank(dev, nranks, id, rank)
	if err := cudaErr(n.rt.api, cudaCode, "cudaSetDevice(%d) for ncclCommInitRank", dev); err != nil {
		return nil, err
	}
	if err := ncclErr(n.api, 0, code, "ncclCommInitRank(rank %d of %d) on device %d", rank, nranks, dev); err != nil {
		return nil, err
	}
	return &Comm{n: n, h: h, dev: dev, rank: rank, size: nranks}, nil
}

// Rank returns this communicator's rank.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.size }

// Device returns the device the communicator uses.
func (c *Comm) Device() int { return c.dev }

// NCCLType returns NCCL's ncclDataType_t for dt; bfloat16 needs NCCL 2.10.
// Bool travels as ncclUint8 (its reductions are the byte maximum and
// minimum: see tensor.Reduce, and the Comm methods map the operation).
// NCCL has no 16-bit integer types: Int16 and Uint16 are an error, and the
// runtime moves them another way (host staging or CUDA-aware MPI).
func NCCLType(dt tensor.DType) (int, error) {
	switch dt {
	case tensor.Int8:
		return 0, nil
	case tensor.Uint8, tensor.Bool:
		return 1, nil
	case tensor.Int32:
		return 2, nil
	case tensor.Int64:
		return 4, nil
	case tensor.Uint64:
		return 5, nil
	case tensor.Float16:
		return 6, nil
	case tensor.Float32:
		return 7, nil
	case tensor.Float64:
		return 8, nil
	case tensor.BFloat16:
		return 9, nil
	}
	return 0, fmt.Errorf("cuda: NCCL has no data type for %v", dt)
}

// NCCLOp returns NCCL's ncclRedOp_t for op. NCCL has no bitwise
// reductions: BitAnd and BitOr are an error.
func NCCLOp(op tensor.ReduceOp) (int, error) {
	switch op {
	case tensor.Sum:
		return 0, nil
	case tensor.Product:
		return 1, nil
	case tensor.Max:
		return 2, nil
	case tensor.Min:
		return 3, nil
	}
	return 0, fmt.Errorf("cuda: NCCL has no %v reduction", op)
}

// reduction returns NCCL's operation for op on elements of type dt: on
// Bool (carried as bytes) Sum is the maximum and Product the minimum.
func reduction(dt tensor.DType, op tensor.ReduceOp) (int, error) {
	if dt == tensor.Bool {
		op = tensor.BoolOp(op)
	}
	return NCCLOp(op)
}

func (c *Comm) dtype(dt tensor.DType) (int, error) {
	t, err := NCCLType(dt)
	if err != nil {
		return 0, err
	}
	if dt == tensor.BFloat16 && ncclCode(c.n.version) < ncclMinVersionBFloat16 {
		return 0, fmt.Errorf("cuda: NCCL %v has no bfloat16 (2.10 or later is needed)", c.n.version)
	}
	return t, nil
}

func (c *Comm) check(op string, count int, bufs ...uintptr) error {
	if c.h == 0 {
		return fmt.Errorf("cuda: %s on a destroyed communicator", op)
	}
	if count < 0 {
		return fmt.Errorf("cuda: %s of %d elements", op, count)
	}
	if count > 0 {
		for _, b := range bufs {
			if b == 0 {
				return fmt.Errorf("cuda: %s of %d elements with device address 0", op, count)
			}
		}
	}
	return nil
}

func (c *Comm) checkRank(op, what string, r int) error {
	if r < 0 || r >= c.size {
		return fmt.Errorf("cuda: %s: %s %d is out of range for %d ranks", op, what, r, c.size)
	}
	return nil
}

// ncclCall describes one call's arguments for prepare.
type ncclCall struct {
	name  string // NCCL's name for the call, for errors
	count int
	bufs  []uintptr // the device buffers that must be set when count > 0
	dt    tensor.DType
	op    *tensor.ReduceOp // the reduction, or nil
	role  string           // "root" or "peer" when the call names a rank
	rank  int
}

// prepare checks a call's arguments and returns NCCL's data type and, for a
// reduction, its operation.
func (c *Comm) prepare(k ncclCall) (t, o int, err error) {
	if err = c.check(k.name, k.count, k.bufs...); err != nil {
		return 0, 0, err
	}
	if k.role != "" {
		if err = c.checkRank(k.name, k.role, k.rank); err != nil {
			return 0, 0, err
		}
	}
	if t, err = c.dtype(k.dt); err != nil {
		return 0, 0, err
	}
	if k.op != nil {
		o, err = reduction(k.dt, *k.op)
	}
	return t, o, err
}

// AllReduce reduces count elements of send across ranks into recv (which
// may equal send) on stream s.
func (c *Comm) AllReduce(send, recv uintptr, count int, dt tensor.DType, op tensor.ReduceOp, s *Stream) error {
	t, o, err := c.prepare(ncclCall{name: "ncclAllReduce", count: count, bufs: []uintptr{send, recv}, dt: dt, op: &op})
	if err != nil {
		return err
	}
	return ncclErr(c.n.api, c.h, c.n.api.allReduce(send, recv, count, t, o, c.h, s.Handle()),
		"ncclAllReduce(%d %v, %v) on rank %d", count, dt, op, c.rank)
}

// Broadcast copies count elements of root's send into every rank's recv.
func (c *Comm) Broadcast(send, recv uintptr, count int, dt tensor.DType, root int, s *Stream) error {
	t, _, err := c.prepare(ncclCall{name: "ncclBroadcast", count: count, bufs: []uintptr{recv}, dt: dt, role: "root", rank: root})
	if err != nil {
		return err
	}
	if c.rank == root && count > 0 && send == 0 {
		return fmt.Errorf("cuda: ncclBroadcast of %d elements from root with send address 0", count)
	}
	return ncclErr(c.n.api, c.h, c.n.api.broadcast(send, recv, count, t, root, c.h, s.Handle()),
		"ncclBroadcast(%d %v, root %d) on rank %d", count, dt, root, c.rank)
}

// Reduce reduces count elements of send across ranks into root's recv.
func (c *Comm) Reduce(send, recv uintptr, count int, dt tensor.DType, op tensor.ReduceOp, root int, s *Stream) error {
	t, o, err := c.prepare(ncclCall{name: "ncclReduce", count: count, bufs: []uintptr{send}, dt: dt, op: &op, role: "root", rank: root})
	if err != nil {
		return err
	}
	return ncclErr(c.n.api, c.h, c.n.api.reduce(send, recv, count, t, o, root, c.h, s.Handle()),
		"ncclReduce(%d %v, %v, root %d) on rank %d", count, dt, op, root, c.rank)
}

// AllGather concatenates every rank's sendCount elements, in rank order,
// into recv (which holds sendCount*Size elements).
func (c *Comm) AllGather(send, recv uintptr, sendCount int, dt tensor.DType, s *Stream) error {
	t, _, err := c.prepare(ncclCall{name: "ncclAllGather", count: sendCount, bufs: []uintptr{send, recv}, dt: dt})
	if err != nil {
		return err
	}
	return ncclErr(c.n.api, c.h, c.n.api.allGather(send, recv, sendCount, t, c.h, s.Handle()),
		"ncclAllGather(%d %v per rank) on rank %d", sendCount, dt, c.rank)
}

// ReduceScatter reduces send (recvCount*Size elements) across ranks and
// leaves block Rank of the result in recv (recvCount elements).
func (c *Comm) ReduceScatter(send, recv uintptr, recvCount int, dt tensor.DType, op tensor.ReduceOp, s *Stream) error {
	t, o, err := c.prepare(ncclCall{name: "ncclReduceScatter", count: recvCount, bufs: []uintptr{send, recv}, dt: dt, op: &op})
	if err != nil {
		return err
	}
	return ncclErr(c.n.api, c.h, c.n.api.reduceScatter(send, recv, recvCount, t, o, c.h, s.Handle()),
		"ncclReduceScatter(%d %v per rank, %v) on rank %d", recvCount, dt, op, c.rank)
}

// Send queues sending count elements at buf to peer. Matching sends and
// receives between ranks must be issued inside one Group, or they can
// deadlock.
func (c *Comm) Send(buf uintptr, count int, dt tensor.DType, peer int, s *Stream) error {
	t, _, err := c.prepare(ncclCall{name: "ncclSend", count: count, bufs: []uintptr{buf}, dt: dt, role: "peer", rank: peer})
	if err != nil {
		return err
	}
	return ncclErr(c.n.api, c.h, c.n.api.send(buf, count, t, peer, c.h, s.Handle()),
		"ncclSend(%d %v to rank %d) on rank %d", count, dt, peer, c.rank)
}

// Recv queues receiving count elements from peer into buf (see Send).
func (c *Comm) Recv(buf uintptr, count int, dt tensor.DType, peer int, s *Stream) error {
	t, _, err := c.prepare(ncclCall{name: "ncclRecv", count: count, bufs: []uintptr{buf}, dt: dt, role: "peer", rank: peer})
	if err != nil {
		return err
	}
	return ncclErr(c.n.api, c.h, c.n.api.recv(buf, count, t, peer, c.h, s.Handle()),
		"ncclRecv(%d %v from rank %d) on rank %d", count, dt, peer, c.rank)
}

// Group runs fn between ncclGroupStart and ncclGroupEnd, so that the NCCL
// calls fn makes (on any communicator) are launched together. NCCL keeps
// the group per host thread, so Group locks the calling goroutine to its
// thread for the duration; fn must make its calls from this goroutine.
// ncclGroupEnd is called even when fn fails; the first error is returned.
func (n *NCCL) Group(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := ncclErr(n.api, 0, n.api.groupStart(), "ncclGroupStart"); err != nil {
		return err
	}
	ferr := fn()
	eerr := ncclErr(n.api, 0, n.api.groupEnd(), "ncclGroupEnd")
	if ferr != nil {
		return ferr
	}
	return eerr
}

// AllToAll sends sendCounts[r] elements to each rank r, taken in rank order
// from send, and receives recvCounts[r] elements from each rank r into recv
// in rank order, with grouped ncclSend/ncclRecv (Horovod's alltoall).
func (c *Comm) AllToAll(send uintptr, sendCounts []int, recv uintptr, recvCounts []int, dt tensor.DType, s *Stream) error {
	if len(sendCounts) != c.size || len(recvCounts) != c.size {
		return fmt.Errorf("cuda: AllToAll needs %d send and receive counts, got %d and %d", c.size, len(sendCounts), len(recvCounts))
	}
	for r := 0; r < c.size; r++ {
		if sendCounts[r] < 0 || recvCounts[r] < 0 {
			return fmt.Errorf("cuda: AllToAll with a negative count for rank %d", r)
		}
	}
	es := uintptr(dt.Size())
	return c.n.Group(func() error {
		var soff, roff uintptr
		for r := 0; r < c.size; r++ {
			if sendCounts[r] > 0 {
				if err := c.Send(send+soff, sendCounts[r], dt, r, s); err != nil {
					return err
				}
			}
			if recvCounts[r] > 0 {
				if err := c.Recv(recv+roff, recvCounts[r], dt, r, s); err != nil {
					return err
				}
			}
			soff += uintptr(sendCounts[r]) * es
			roff += uintptr(recvCounts[r]) * es
		}
		return nil
	})
}

// AsyncError returns an error a collective hit after it was queued (for
// example a network failure), or nil (ncclCommGetAsyncError).
func (c *Comm) AsyncError() error {
	if c.h == 0 {
		return nil
	}
	v, code := c.n.api.commQuery(queryAsyncError, c.h)
	if err := ncclErr(c.n.api, c.h, code, "ncclCommGetAsyncError on rank %d", c.rank); err != nil {
		return err
	}
	return ncclErr(c.n.api, c.h, v, "asynchronous NCCL error on rank %d", c.rank)
}

// Destroy frees the communicator after its queued work completes
// (ncclCommDestroy). Further calls fail; a second Destroy is a no-op.
func (c *Comm) Destroy() error {
	if c.h == 0 {
		return nil
	}
	h := c.h
	c.h = 0
	return ncclErr(c.n.api, 0, c.n.api.commDestroy(h), "ncclCommDestroy on rank %d", c.rank)
}

// Abort frees the communicator at once, abandoning queued work
// (ncclCommAbort); use it when a peer has failed.
func (c *Comm) Abort() error {
	if c.h == 0 {
		return nil
	}
	h := c.h
	c.h = 0
	return ncclErr(c.n.api, 0, c.n.api.commAbort(h), "ncclCommAbort on rank %d", c.rank)
}
