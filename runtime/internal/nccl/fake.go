package nccl

import (
	"crypto/rand"
	"fmt"
	"sync"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// FakeCalls counts the collectives a Fake's communicators have run, summed
// over ranks.
type FakeCalls struct {
	UniqueIDs, Comms, Closed                                          int
	AllReduce, Average, AllGather, Broadcast, ReduceScatter, AllToAll int
	AllReduceElems                                                    int64
}

// Fake is an NCCL for tests: its communicators run their collectives over
// an in-memory host group (one member per rank) on the host memory behind
// cuda.Fake devices. A collective first performs the device's queued
// copies (as a stream would, in order), then runs at once.
type Fake struct {
	group    []comm.Communicator
	noAvg    bool
	mu       sync.Mutex
	issued   map[cuda.UniqueID]bool
	joined   map[int]bool
	calls    FakeCalls
	joinErrs map[int]error
}

// FakeOptions configures a Fake.
type FakeOptions struct {
	// NoAverage makes the fake an NCCL older than 2.10, without ncclAvg
	// (and without bfloat16).
	NoAverage bool
}

// NewFake returns a fake NCCL over group, one member per rank.
func NewFake(group []comm.Communicator, o FakeOptions) *Fake {
	return &Fake{group: group, noAvg: o.NoAverage, issued: make(map[cuda.UniqueID]bool), joined: make(map[int]bool)}
}

// Calls returns the counters.
func (f *Fake) Calls() FakeCalls {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *Fake) count(fn func(c *FakeCalls)) {
	f.mu.Lock()
	fn(&f.calls)
	f.mu.Unlock()
}

// Average reports whether the fake averages (unless NoAverage).
func (f *Fake) Average() bool { return !f.noAvg }

// BFloat16 reports whether the fake has bfloat16 (unless NoAverage).
func (f *Fake) BFloat16() bool { return !f.noAvg }

// UniqueID draws 128 random bytes and remembers them; NewComm accepts only
// an id drawn here, as a real NCCL would only connect ranks that agree.
func (f *Fake) UniqueID() (cuda.UniqueID, error) {
	var id cuda.UniqueID
	if _, err := rand.Read(id[:]); err != nil {
		return id, err
	}
	f.mu.Lock()
	f.issued[id] = true
	f.calls.UniqueIDs++
	f.mu.Unlock()
	return id, nil
}

// NewComm returns rank's communicator on dev, which must be a *cuda.Fake.
func (f *Fake) NewComm(dev cuda.Device, nranks, rank int, id cuda.UniqueID) (Comm, error) {
	d, ok := dev.(*cuda.Fake)
	if !ok {
		return nil, fmt.Errorf("nccl: the fake NCCL needs a *cuda.Fake device, not %T", dev)
	}
	if nranks != len(f.group) || rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("nccl: fake NewComm of rank %d of %d on a group of %d", rank, nranks, len(f.group))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.issued[id] {
		return nil, fmt.Errorf("nccl: fake NewComm on rank %d with an id that UniqueID never issued (invalid usage)", rank)
	}
	if f.joined[rank] {
		return nil, fmt.Errorf("nccl: fake NewComm: rank %d joined twice", rank)
	}
	f.joined[rank] = true
	f.calls.Comms++
	return &fakeComm{f: f, dev: d, host: f.group[rank], rank: rank}, nil
}

type fakeComm struct {
	f      *Fake
	dev    *cuda.Fake
	host   comm.Communicator
	rank   int
	closed bool
}

// view performs the device's queued work and returns count elements at p
// as a host tensor over the fake device's memory.
func (c *fakeComm) view(p uintptr, count int, dt tensor.DType) (*tensor.Tensor, error) {
	if c.closed {
		return nil, fmt.Errorf("nccl: fake communicator of rank %d used after Close", c.rank)
	}
	if _, err := cuda.NCCLType(dt); err != nil { // as real NCCL: no int16, no uint16
		return nil, err
	}
	if count == 0 {
		return tensor.New(dt, 0), nil
	}
	b, err := c.dev.Bytes(p, count*dt.Size())
	if err != nil {
		return nil, err
	}
	return tensor.FromBytes(dt, b)
}

func (c *fakeComm) flush() error {
	if c.closed {
		return fmt.Errorf("nccl: fake communicator of rank %d used after Close", c.rank)
	}
	return c.dev.Sync()
}

func (c *fakeComm) AllReduce(buf uintptr, count int, dt tensor.DType, op tensor.ReduceOp, average bool) error {
	if average && c.f.noAvg {
		return fmt.Errorf("nccl: fake NCCL without ncclAvg asked to average")
	}
	if err := c.flush(); err != nil {
		return err
	}
	t, err := c.view(buf, count, dt)
	if err != nil {
		return err
	}
	if average {
		op = tensor.Sum
	}
	if err := c.host.Allreduce(t, op); err != nil {
		return err
	}
	if average {
		tensor.Scale(dt, t.Bytes(), 1/float64(c.host.Size()))
	}
	c.f.count(func(k *FakeCalls) {
		k.AllReduce++
		k.AllReduceElems += int64(count)
		if average {
			k.Average++
		}
	})
	return nil
}

func (c *fakeComm) AllGatherV(send, recv uintptr, counts []int, dt tensor.DType) error {
	if err := c.flush(); err != nil {
		return err
	}
	s, err := c.view(send, counts[c.rank], dt)
	if err != nil {
		return err
	}
	r, err := c.view(recv, comm.Sum(counts), dt)
	if err != nil {
		return err
	}
	c.f.count(func(k *FakeCalls) { k.AllGather++ })
	return c.host.Allgatherv(s, r, counts)
}

func (c *fakeComm) Broadcast(buf uintptr, count int, dt tensor.DType, root int) error {
	if err := c.flush(); err != nil {
		return err
	}
	t, err := c.view(buf, count, dt)
	if err != nil {
		return err
	}
	c.f.count(func(k *FakeCalls) { k.Broadcast++ })
	return c.host.Bcast(t, root)
}

func (c *fakeComm) ReduceScatterV(send, recv uintptr, counts []int, dt tensor.DType, op tensor.ReduceOp) error {
	if err := c.flush(); err != nil {
		return err
	}
	s, err := c.view(send, comm.Sum(counts), dt)
	if err != nil {
		return err
	}
	r, err := c.view(recv, counts[c.rank], dt)
	if err != nil {
		return err
	}
	c.f.count(func(k *FakeCalls) { k.ReduceScatter++ })
	return c.host.ReduceScatter(s, r, counts, op)
}

func (c *fakeComm) AllToAllV(send uintptr, sendCounts []int, recv uintptr, recvCounts []int, dt tensor.DType) error {
	if err := c.flush(); err != nil {
		return err
	}
	s, err := c.view(send, comm.Sum(sendCounts), dt)
	if err != nil {
		return err
	}
	r, err := c.view(recv, comm.Sum(recvCounts), dt)
	if err != nil {
		return err
	}
	c.f.count(func(k *FakeCalls) { k.AllToAll++ })
	return c.host.Alltoallv(s, sendCounts, r, recvCounts)
}

func (c *fakeComm) Err() error { return nil }

func (c *fakeComm) Close() error {
	if !c.closed {
		c.closed = true
		c.f.count(func(k *FakeCalls) { k.Closed++ })
	}
	return nil
}
