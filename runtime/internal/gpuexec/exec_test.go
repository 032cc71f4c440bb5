package gpuexec

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/runtime/internal/timeline"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// host is a Host of one rank whose reduction doubles the bytes (the sum
// of two ranks holding the same data), records the pieces it is handed,
// and fails the failAt-th (from 1) when set.
type host struct {
	com    comm.Communicator
	log    zerolog.Logger
	pieces []int
	failAt int
	acts   []string
	last   time.Time
	t      *testing.T
}

var errPiece = errors.New("injected: the transport failed under a piece")

func (h *host) Comm() comm.Communicator { return h.com }
func (h *host) Rank() int               { return 0 }
func (h *host) Size() int               { return 1 }
func (h *host) FusionThreshold() int64  { return 64 << 20 }
func (h *host) Timeline() bool          { return true }
func (h *host) Log() *zerolog.Logger    { return &h.log }

func (h *host) ReduceBytes(b []byte, dt tensor.DType, op tensor.ReduceOp) error {
	h.pieces = append(h.pieces, len(b))
	if len(h.pieces) == h.failAt {
		return errPiece
	}
	v, err := tensor.FromBytes(dt, b)
	if err != nil {
		return err
	}
	tensor.ScaleTensor(v, 2)
	return nil
}

func (h *host) PlanAlltoall([]int, []int64) (AlltoallPlan, error) {
	return AlltoallPlan{}, errors.New("no alltoall here")
}

// Activity records the phases and checks that they follow each other.
func (h *host) Activity(act string, start, end time.Time) {
	if start.Before(h.last) || end.Before(start) {
		h.t.Errorf("%s from %v to %v, after a phase that ended at %v", act, start, end, h.last)
	}
	h.last = end
	h.acts = append(h.acts, act)
}

func newHost(t *testing.T) *host {
	g := memcomm.NewGroup(1)
	t.Cleanup(func() { g[0].Close() })
	return &host{com: g[0], log: zerolog.Nop(), t: t}
}

// fusedAllreduce performs a staged, fused sum of tensors of the given
// float32 counts on dev, in pieces of piece bytes, and returns the
// entries.
func fusedAllreduce(t *testing.T, x *Executor, h *host, dev *cuda.Fake, counts []int) ([]Entry, error) {
	t.Helper()
	if _, err := x.Setup(h); err != nil {
		t.Fatal(err)
	}
	resp := &wire.Response{Type: wire.ResponseType(wire.Allreduce), DType: tensor.Float32, Op: wire.Sum, Prescale: 1, Postscale: 1}
	var ents []Entry
	for i, n := range counts {
		vals := make([]float32, n)
		for j := range vals {
			vals[j] = float32(1000*i + j)
		}
		in, err := cuda.ToDevice(dev, tensor.FromFloat32(vals, n))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cuda.FreeTensor(dev, in) })
		req := &wire.Request{Name: "t" + string(rune('a'+i)), DType: tensor.Float32, Shape: []int64{int64(n)}}
		resp.Names = append(resp.Names, req.Name)
		resp.Shapes = append(resp.Shapes, req.Shape)
		ents = append(ents, Entry{Req: req, In: in})
	}
	return ents, x.Perform(h, resp, ents)
}

// TestStagedAllreduceInPieces: 300 + 337 float32s (2548 bytes) staged in
// pieces of 1000 bytes: three host reductions, the last of 548 bytes,
// every element right, the phases in order.
func TestStagedAllreduceInPieces(t *testing.T) {
	dev := cuda.NewFake(cuda.FakeConfig{})
	x := New(Options{Device: dev, StagePiece: 1000}, zerolog.Nop())
	h := newHost(t)
	ents, err := fusedAllreduce(t, x, h, dev, []int{300, 337})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.pieces, []int{1000, 1000, 548}) {
		t.Errorf("pieces of %v bytes, want 1000, 1000, 548", h.pieces)
	}
	for i, e := range ents {
		out, err := cuda.ToHost(dev, e.Out)
		if err != nil {
			t.Fatal(err)
		}
		for j, v := range out.Float32s() {
			if want := 2 * float32(1000*i+j); v != want {
				t.Fatalf("tensor %d element %d = %v, want %v", i, j, v, want)
			}
		}
		if err := cuda.FreeTensor(dev, e.Out); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{timeline.MemcpyInFusion, timeline.MemcpyInHost, timeline.MPIAllreduce, timeline.MemcpyOutHost, timeline.MemcpyOutFusion}
	if !slices.Equal(h.acts, want) {
		t.Errorf("phases %v, want %v", h.acts, want)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStagedPieceFailure: the second piece's reduction fails; Perform
// returns that error, frees the results it allocated and leaves the
// device usable.
func TestStagedPieceFailure(t *testing.T) {
	dev := cuda.NewFake(cuda.FakeConfig{})
	x := New(Options{Device: dev, StagePiece: 1000}, zerolog.Nop())
	h := newHost(t)
	h.failAt = 2
	before := dev.Stats()
	ents, err := fusedAllreduce(t, x, h, dev, []int{300, 337})
	if !errors.Is(err, errPiece) {
		t.Fatalf("Perform = %v, want the piece's error", err)
	}
	if len(h.pieces) != 2 {
		t.Errorf("%d pieces reduced after a failure in the second, want 2", len(h.pieces))
	}
	// The inputs and the fusion buffer are live; the two results are not.
	if got := dev.Stats().LiveAllocs - before.LiveAllocs; got != 3 {
		t.Errorf("%d allocations live after the failure, want 3 (two inputs, the fusion buffer)", got)
	}
	for _, e := range ents {
		if _, err := cuda.ToHost(dev, e.In); err != nil {
			t.Fatalf("the device after a failed piece: %v", err)
		}
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestForSetSharesTheDevice: a process set's executor uses the device the
// global set's executor has, also one it opened after the set was made,
// frees its own buffers at Close and leaves the device open.
func TestForSetSharesTheDevice(t *testing.T) {
	dev := cuda.NewFake(cuda.FakeConfig{})
	x := New(Options{}, zerolog.Nop())
	set := x.ForSet(zerolog.Nop())
	if set.device() != nil {
		t.Fatal("a device before any was opened")
	}
	x.mu.Lock()
	x.dev = dev // as Device does at the first GPU tensor
	x.mu.Unlock()
	if set.device() != dev {
		t.Fatal("the set's executor does not see the device the runtime opened")
	}
	if _, err := set.fusionBuffer(dev, 100, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := set.hostBuffer(dev, 100); err != nil {
		t.Fatal(err)
	}
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	if s := dev.Stats(); s.LiveAllocs != 0 || s.LiveHostAllocs != 0 {
		t.Errorf("the set's buffers are still live: %+v", s)
	}
	if _, err := dev.Alloc(8); err != nil {
		t.Errorf("the set closed the device: %v", err)
	}
	x.mu.Lock()
	x.dev = nil
	x.mu.Unlock()
}
