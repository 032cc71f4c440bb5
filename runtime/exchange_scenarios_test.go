package runtime

// Exchange scenarios, each run by every rank of a job of any size >= 1: in
// memory by exchange_test.go and as processes by exchange_mpi_test.go
// (under mpirun and gohorovodrun --gloo).

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gohorovod/gohorovod/tensor"
)

// rowsOf is the tensor rank r sends in the scenarios: r+1 rows of 3
// columns (odd sizes that differ per rank), element i holding 100r+i.
func rowsOf(r int) *tensor.Tensor {
	t := tensor.New(tensor.Float32, r+1, 3)
	for i := range t.Float32s() {
		t.Float32s()[i] = float32(100*r + i)
	}
	return t
}

// wantFrom checks that got is exactly what rank s sent (rowsOf(s)), or a
// zero-row tensor for NoPeer.
func wantFrom(what string, got *tensor.Tensor, s int) error {
	if s == NoPeer {
		if got.Len() != 0 {
			return fmt.Errorf("%s: received %v from no rank", what, got.Shape())
		}
		return nil
	}
	want := rowsOf(s)
	if !slices.Equal(got.Shape(), want.Shape()) || !slices.Equal(got.Float32s(), want.Float32s()) {
		return fmt.Errorf("%s: received %v %v, want rank %d's %v %v", what, got.Shape(), got.Float32s(), s, want.Shape(), want.Float32s())
	}
	return nil
}

// scenarioExchange: a ring shift each way, pairwise swaps (the odd one out
// with itself), and a one-way send with every other rank NoPeer; then a
// ring shift within each parity set (even and odd: ranks within the set).
func scenarioExchange(r *Runtime, even, odd *ProcessSet) error {
	ctx, cancel := psCtx()
	defer cancel()
	rank, n := r.Rank(), r.Size()
	oneWay := func(q int) (int, int) {
		d, s := NoPeer, NoPeer
		if q == 0 {
			d = n - 1
		}
		if q == n-1 {
			s = 0
		}
		return d, s
	}
	swap := func(q int) (int, int) {
		p := q ^ 1
		if p >= n {
			p = q
		}
		return p, p
	}
	for _, c := range []struct {
		name string
		pair func(q int) (int, int)
	}{
		{"right", func(q int) (int, int) { return (q + 1) % n, (q + n - 1) % n }},
		{"left", func(q int) (int, int) { return (q + n - 1) % n, (q + 1) % n }},
		{"swap", swap},
		{"oneway", oneWay},
	} {
		d, s := c.pair(rank)
		in := rowsOf(rank)
		got, err := r.Exchange(ctx, in, d, s, c.name)
		if err != nil {
			return fmt.Errorf("exchange %s: %w", c.name, err)
		}
		if err := wantFrom("exchange "+c.name, got, s); err != nil {
			return err
		}
		if err := wantFrom("exchange "+c.name+" (input)", in, rank); err != nil {
			return err
		}
	}
	set := even
	if rank%2 == 1 {
		set = odd
	}
	if set == nil || !set.Included() {
		return nil
	}
	rs, m, k := set.Ranks(), set.Size(), set.Rank()
	got, err := r.Exchange(ctx, rowsOf(rank), (k+1)%m, (k+m-1)%m, "set", InProcessSet(set))
	if err != nil {
		return fmt.Errorf("exchange within %v: %w", rs, err)
	}
	return wantFrom(fmt.Sprintf("exchange within %v", rs), got, rs[(k+m-1)%m])
}

// scenarioExchangeErrors: pairs that do not match fail every rank's handle
// with a text naming them, and the runtime keeps working; a peer out of
// range is refused at once.
func scenarioExchangeErrors(r *Runtime) error {
	ctx, cancel := psCtx()
	defer cancel()
	rank, n := r.Rank(), r.Size()
	if _, err := r.ExchangeAsync(rowsOf(rank), n, 0, "range"); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "destination rank") {
		return fmt.Errorf("destination %d of %d: %v, want ErrInvalidArgument naming the destination", n, n, err)
	}
	if _, err := r.ExchangeAsync(rowsOf(rank), 0, -2, "range"); !errors.Is(err, ErrInvalidArgument) {
		return fmt.Errorf("source -2: %v, want ErrInvalidArgument", err)
	}
	// Every rank sends to the next, but receives from itself (unless n is 1).
	_, err := r.Exchange(ctx, rowsOf(rank), (rank+1)%n, rank, "unmatched")
	if n > 1 {
		const want = "rank 0 sends to rank 1, but rank 1 receives from rank 1"
		if err == nil || !strings.Contains(err.Error(), want) {
			return fmt.Errorf("unmatched pairs: %v, want an error containing %q", err, want)
		}
	} else if err != nil {
		return err
	}
	out, err := r.Allreduce(ctx, tensor.FromFloat32([]float32{1}), "after", Sum)
	if err != nil || out.Float32s()[0] != float32(n) {
		return fmt.Errorf("allreduce after the failed exchange: %v %v", out, err)
	}
	return nil
}
