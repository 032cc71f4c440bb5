//go:build (mpi && cgo) || gloo

// The runtime as several processes (scripts/mpitest.sh, np 2, 3 and 4): the
// same behaviour as the in-memory tests, over a real transport. Built with
// the "mpi" tag and run under mpirun, TestMain initialises MPI once and
// finalises it at the end, and each test runs its own Init/Shutdown
// (WithoutMPIFinalize) on a fresh duplicate of MPI's world. Built with the
// "gloo" tag (no cgo needed) and run under gohorovodrun --gloo, TestMain
// joins the job's rendezvous once (a process meets the others only once)
// and each test's runtime runs over a fresh Split of that world
// (worldOpts). The tests that only mean something over MPI skip there.

package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/mpi"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/mpicomm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/transport"
	"github.com/gohorovod/gohorovod/tensor"
)

// world is the job's world communicator: MPI's, or the embedded
// transport's when worldEmbedded.
var (
	world         comm.Communicator
	worldEmbedded bool
)

func TestMain(m *testing.M) {
	if os.Getenv(aloneEnv) != "" {
		os.Exit(aloneChild()) // init_mpi_test.go: a process without a launcher
	}
	w, embedded, err := openWorld()
	if err != nil {
		fmt.Fprintln(os.Stderr, "runtime multi-process tests:", err)
		os.Exit(2)
	}
	world, worldEmbedded = w, embedded
	code := m.Run()
	w.Close()
	if !embedded {
		if err := mpicomm.Finalize(); err != nil {
			fmt.Fprintln(os.Stderr, "mpicomm.Finalize:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// openWorld opens the job's world as Init would: over the embedded
// transport when the environment selects it (gohorovodrun --gloo), else
// over MPI (which fails, saying so, in a binary built without it).
func openWorld() (comm.Communicator, bool, error) {
	cfg, err := config.FromEnv(os.LookupEnv)
	if err != nil {
		return nil, false, err
	}
	if cfg.Gloo() {
		pl, err := transport.Open(cfg, 0, transport.Env{Lookup: os.LookupEnv})
		return pl.Comm, true, err
	}
	if !mpi.Built {
		return nil, false, errors.New("built without MPI (the \"gloo\" tag) and not started by gohorovodrun --gloo: " +
			"run it as scripts/mpitest.sh does, bin/mpitest/gohorovodrun --gloo -np N TEST-BINARY -test.run '^Test(MPI.*|InitAloneMPIBuild)$'")
	}
	c, err := mpicomm.New()
	return c, false, err
}

// worldOpts returns the options that start one test's runtime on every
// rank of the job. Under MPI, WithoutMPIFinalize: Init opens MPI's world
// again, and MPI stays up for the next test. Over the embedded transport,
// which a process joins only once, WithCommunicator of a fresh Split of the
// world; the split is closed at the end of the test, after the runtime's
// Shutdown (cleanups run last first, so call worldOpts before registering
// that Shutdown).
func worldOpts(t *testing.T) []Option {
	t.Helper()
	if !worldEmbedded {
		return []Option{WithoutMPIFinalize()}
	}
	return []Option{WithCommunicator(freshWorld(t))}
}

// freshWorld returns a new communicator over the job's ranks, closed at the
// end of the test: a duplicate of MPI's world, or a Split of the embedded
// transport's.
func freshWorld(t *testing.T) comm.Communicator {
	t.Helper()
	var c comm.Communicator
	var err error
	if worldEmbedded {
		c, err = world.Split(0, world.Rank())
	} else {
		c, err = mpicomm.New()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// skipEmbedded skips a test that only means something over MPI when the job
// runs over the embedded transport.
func skipEmbedded(t *testing.T, why string) {
	t.Helper()
	if worldEmbedded {
		t.Skip("MPI only: " + why)
	}
}

func mpiCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mpiRuntime starts a Runtime over the job's world (worldOpts); with count,
// over a counting wrapper of a fresh communicator (freshWorld).
func mpiRuntime(t *testing.T, count bool) (*Runtime, *counting) {
	t.Helper()
	r := new(Runtime)
	opts := []Option{WithConfig(testConfig()), WithoutMPIFinalize(), WithLogger(zerolog.Nop())}
	var c *counting
	if count {
		c = &counting{Communicator: freshWorld(t)}
		opts = append(opts, WithCommunicator(c))
	} else {
		opts = append(opts, worldOpts(t)...)
	}
	if err := r.Init(opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Shutdown()
		world.Barrier()
	})
	return r, c
}

func TestMPIPlacement(t *testing.T) {
	r, _ := mpiRuntime(t, false)
	rank := r.Rank()
	size := r.Size()
	if rank != world.Rank() || size != world.Size() {
		t.Fatalf("rank %d size %d, MPI says %d of %d", rank, size, world.Rank(), world.Size())
	}
	ls := r.LocalSize()
	cs := r.CrossSize()
	if ls*cs != size {
		t.Fatalf("local size %d x cross size %d != %d", ls, cs, size)
	}
	ok, err := r.MPIThreadsSupported()
	if worldEmbedded {
		if err == nil || ok {
			t.Fatalf("MPIThreadsSupported %v %v over the embedded transport, want MPI's not enabled", ok, err)
		}
		return
	}
	if err != nil || !ok {
		t.Fatalf("MPIThreadsSupported %v %v", ok, err)
	}
}

func TestMPIAllreduceFusionCache(t *testing.T) {
	r, c := mpiRuntime(t, true)
	rank := r.Rank()
	size := r.Size()
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64} {
		for _, op := range []ReduceOp{Sum, Average, Min, Max, Product} {
			out, err := r.Allreduce(mpiCtx(t), fill(dt, 3, float64(rank+1)), fmt.Sprintf("%v.%v", dt, op), op)
			if err != nil {
				t.Fatal(err)
			}
			want := map[ReduceOp]float64{Sum: float64(size * (size + 1) / 2), Min: 1, Max: float64(size)}[op]
			switch op {
			case Average:
				want = float64(size*(size+1)/2) / float64(size)
				if !dt.IsFloat() {
					want = float64(int(want))
				}
			case Product:
				want = 1
				for i := 1; i <= size; i++ {
					want *= float64(i)
				}
			}
			if got := first(out); got != want {
				t.Errorf("%v %v: got %v, want %v", dt, op, got, want)
			}
		}
	}
	round := func() {
		ts := make([]*tensor.Tensor, 30)
		for i := range ts {
			ts[i] = fill(tensor.Float32, 100+i, float64(rank))
		}
		outs, err := r.GroupedAllreduce(mpiCtx(t), ts, "grads", Sum)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range outs {
			if o.Float32s()[99+i] != float32(size*(size-1)/2) {
				t.Fatalf("tensor %d: %v", i, o.Float32s()[0])
			}
		}
	}
	a0 := c.dataAllreduce.Load()
	round()
	if got := c.dataAllreduce.Load() - a0; got != 1 {
		t.Errorf("30 grouped tensors took %d allreduces, want 1 (fused)", got)
	}
	g := c.gathers.Load()
	round()
	if got := c.gathers.Load(); got != g {
		t.Errorf("second round negotiated again: cache not used")
	}
}

func TestMPICollectives(t *testing.T) {
	r, _ := mpiRuntime(t, false)
	checkCollectives(t, r)
}

// checkCollectives runs allgather, broadcast, alltoall, reducescatter,
// barrier and (at power-of-two sizes) Adasum on r and checks the results.
func checkCollectives(t *testing.T, r *Runtime) {
	t.Helper()
	rank := r.Rank()
	size := r.Size()
	ctx := mpiCtx(t)
	in := tensor.New(tensor.Int64, rank+1, 2)
	for i := range in.Int64s() {
		in.Int64s()[i] = int64(rank)
	}
	out, err := r.Allgather(ctx, in, "ag")
	if err != nil {
		t.Fatal(err)
	}
	if out.Shape()[0] != size*(size+1)/2 || out.Int64s()[len(out.Int64s())-1] != int64(size-1) {
		t.Fatalf("allgather %v %v", out.Shape(), out.Int64s())
	}
	b, err := r.Broadcast(ctx, fill(tensor.Float32, 5, float64(rank)), size-1, "bc")
	if err != nil || b.Float32s()[4] != float32(size-1) {
		t.Fatalf("broadcast %v %v", err, b)
	}
	a := tensor.New(tensor.Int32, size)
	for i := range a.Int32s() {
		a.Int32s()[i] = int32(10*rank + i)
	}
	ao, recv, err := r.Alltoall(ctx, a, nil, "a2a")
	if err != nil {
		t.Fatal(err)
	}
	for src := 0; src < size; src++ {
		if ao.Int32s()[src] != int32(10*src+rank) || recv[src] != 1 {
			t.Fatalf("alltoall %v %v", ao.Int32s(), recv)
		}
	}
	rs := tensor.New(tensor.Float64, 2*size+1)
	for i := range rs.Float64s() {
		rs.Float64s()[i] = float64(i)
	}
	ro, err := r.Reducescatter(ctx, rs, "rs", Sum)
	if err != nil {
		t.Fatal(err)
	}
	if ro.Len() != ReducescatterRows(2*size+1, size, rank) {
		t.Fatalf("reducescatter rows %d", ro.Len())
	}
	if err := r.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if size&(size-1) == 0 {
		v := tensor.New(tensor.Float64, size)
		v.Float64s()[rank] = 1
		ad, err := r.Allreduce(ctx, v, "adasum", Adasum)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ad.Float64s() {
			if x != 1 {
				t.Fatalf("adasum of orthogonal unit vectors %v", ad.Float64s())
			}
		}
	}
}

func TestMPIMismatchAndJoin(t *testing.T) {
	r, _ := mpiRuntime(t, false)
	rank := r.Rank()
	size := r.Size()
	ctx := mpiCtx(t)
	_, err := r.Allreduce(ctx, fill(tensor.Float32, 2+min(rank, 1), 1), "mm", Sum)
	var oe *OpError
	want := "Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [2], but another rank sent a tensor of shape [3]."
	if !errors.As(err, &oe) || oe.Message != want {
		t.Fatalf("mismatch: %v", err)
	}
	if _, err := r.Allreduce(ctx, fill(tensor.Float32, 2, 1), "ok", Sum); err != nil {
		t.Fatalf("after mismatch: %v", err)
	}
	// The last rank joins at once; the others allreduce twice, zeros from it.
	if rank != size-1 {
		for i := 0; i < 2; i++ {
			out, err := r.Allreduce(ctx, fill(tensor.Float32, 2, 1), fmt.Sprintf("j%d", i), Sum)
			if err != nil {
				t.Fatal(err)
			}
			if out.Float32s()[0] != float32(size-1) {
				t.Fatalf("join step %d: %v", i, out.Float32s())
			}
		}
	}
	last, err := r.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lasts := tensor.New(tensor.Int64, 1)
	lasts.Int64s()[0] = int64(last)
	all := tensor.New(tensor.Int64, size)
	ones := slices.Repeat([]int{1}, size)
	if err := world.Allgatherv(lasts, all, ones); err != nil {
		t.Fatal(err)
	}
	for _, v := range all.Int64s() {
		if v != all.Int64s()[0] || v < 0 {
			t.Fatalf("last joined ranks differ: %v", all.Int64s())
		}
	}
}

func TestMPIShutdownOnOneRank(t *testing.T) {
	r, _ := mpiRuntime(t, false)
	rank := r.Rank()
	if rank == 0 {
		if err := r.Shutdown(); err != nil {
			t.Fatal(err)
		}
		return
	}
	h, err := r.AllreduceAsync(fill(tensor.Float32, 1, 1), "orphan", Sum)
	if err != nil && !errors.Is(err, ErrShutdown) {
		t.Fatal(err)
	}
	if err == nil {
		if err := h.Wait(mpiCtx(t)); !errors.Is(err, ErrShutdown) {
			t.Fatalf("pending op after rank 0 shut down: %v", err)
		}
	}
}

// TestMPIFlatAndSeparateLayouts reduces a model's gradients held as views
// of one flat buffer on even ranks and as separate tensors on odd ranks:
// the ranks make the same MPI calls whatever their layouts, the even ranks
// without copying through the fusion buffer.
func TestMPIFlatAndSeparateLayouts(t *testing.T) {
	r := new(Runtime)
	if err := r.Init(append(worldOpts(t), WithConfig(testConfig()), WithLogger(zerolog.Nop()),
		WithFusionChunkBytes(1024), WithMaxFusedBytes(0))...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Shutdown()
		world.Barrier()
	})
	rank := r.Rank()
	size := r.Size()
	shapes := make([]tensor.Shape, 40)
	names := make([]string, len(shapes))
	for i := range shapes {
		shapes[i] = tensor.Shape{64 + 8*i} // 256..568 bytes: pieces cut tensors
		names[i] = fmt.Sprintf("layout.%d", i)
	}
	var ts []*tensor.Tensor
	if rank%2 == 0 {
		_, ts = tensor.NewFlat(tensor.Float32, shapes...)
	} else {
		for _, s := range shapes {
			ts = append(ts, tensor.New(tensor.Float32, s...))
		}
	}
	g, err := r.NewAllreduceGroup(ts, names, Average)
	if err != nil {
		t.Fatal(err)
	}
	for step := 0; step < 3; step++ {
		// The average of rank+i+j+step over the ranks.
		err := groupStep(mpiCtx(t), g, ts, step,
			func(i, j int) float32 { return float32(rank + i + j + step) },
			func(i, j int) float32 { return float32(size-1)/2 + float32(i+j+step) })
		if err != nil {
			t.Fatal(err)
		}
	}
	s := r.Stats()
	if rank%2 == 0 && (s.FusedInPlace == 0 || s.FusedCopied != 0) {
		t.Errorf("flat rank %d: %d bytes in place, %d copied; want all in place", rank, s.FusedInPlace, s.FusedCopied)
	}
	if rank%2 == 1 && s.FusedCopied == 0 {
		t.Errorf("rank %d with separate tensors copied nothing", rank)
	}
	if size > 1 && s.FusedWhole != 0 {
		t.Errorf("rank %d: %d responses reduced whole where odd ranks' tensors are separate", rank, s.FusedWhole)
	}
}

// TestMPIFlatEverywhereReducedWhole: where every rank's gradients are
// views of one flat buffer, each step's fused response is reduced where it
// lies, whole, rather than in fusion pieces; the sums are exact.
func TestMPIFlatEverywhereReducedWhole(t *testing.T) {
	r := new(Runtime)
	if err := r.Init(append(worldOpts(t), WithConfig(testConfig()), WithLogger(zerolog.Nop()),
		WithFusionChunkBytes(1024), WithMaxFusedBytes(0))...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Shutdown()
		world.Barrier()
	})
	rank, size := r.Rank(), r.Size()
	shapes := make([]tensor.Shape, 40)
	names := make([]string, len(shapes))
	total := 0
	for i := range shapes {
		shapes[i] = tensor.Shape{64 + 8*i}
		names[i] = fmt.Sprintf("whole.%d", i)
		total += 4 * (64 + 8*i)
	}
	_, ts := tensor.NewFlat(tensor.Float32, shapes...)
	g, err := r.NewAllreduceGroup(ts, names, Sum)
	if err != nil {
		t.Fatal(err)
	}
	const steps = 3
	for step := 0; step < steps; step++ {
		err := groupStep(mpiCtx(t), g, ts, step,
			func(i, j int) float32 { return float32(rank + i + j + step) },
			func(i, j int) float32 { return float32(size*(size-1)/2 + size*(i+j+step)) })
		if err != nil {
			t.Fatal(err)
		}
	}
	s := r.Stats()
	if s.FusedWhole != steps || s.FusedInPlace != steps*int64(total) || s.FusedCopied != 0 {
		t.Errorf("rank %d: %d responses whole, %d bytes in place, %d copied; want %d, %d, 0",
			rank, s.FusedWhole, s.FusedInPlace, s.FusedCopied, steps, steps*total)
	}
}
