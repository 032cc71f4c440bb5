package runtime

// Process set scenarios, each run by every rank of a job of any size >= 2:
// in memory by processset_test.go (sizes 3 and 4) and as processes by
// processset_mpi_test.go (under mpirun and gohorovodrun --gloo, np 2, 3
// and 4). Each returns the rank's error, nil when it saw what it should.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gohorovod/gohorovod/tensor"
)

// parity returns the ranks of [0, size) with the given parity.
func parity(size, odd int) []int {
	var rs []int
	for r := odd; r < size; r += 2 {
		rs = append(rs, r)
	}
	return rs
}

// staticParitySets returns the options that register the even and odd
// ranks as sets 1 and 2, and the two (unregistered) sets.
func staticParitySets(size int) ([]Option, *ProcessSet, *ProcessSet) {
	even, odd := NewProcessSet(parity(size, 0)...), NewProcessSet(parity(size, 1)...)
	return []Option{WithProcessSets(even, odd)}, even, odd
}

func sumOf(rs []int, f func(int) float64) float64 {
	s := 0.0
	for _, r := range rs {
		s += f(r)
	}
	return s
}

func psCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 60*time.Second)
}

// scenarioDisjointSets: the even and odd sets reduce tensors of the same
// names at the same time, interleaved with the global set's, and every
// other collective runs within a set.
func scenarioDisjointSets(r *Runtime, even, odd *ProcessSet) error {
	ctx, cancel := psCtx()
	defer cancel()
	rank, size := r.Rank(), r.Size()
	mine, other := even, odd
	if rank%2 == 1 {
		mine, other = odd, even
	}
	if even.ID() != 1 || odd.ID() != 2 || r.GlobalProcessSet().ID() != 0 {
		return fmt.Errorf("ids %d %d %d, want 1 2 0", even.ID(), odd.ID(), r.GlobalProcessSet().ID())
	}
	if !mine.Included() || other.Included() || other.Rank() != -1 {
		return fmt.Errorf("included %v/%v, other's rank %d", mine.Included(), other.Included(), other.Rank())
	}
	members := mine.Ranks()
	if want := slices.Index(members, rank); mine.Rank() != want || mine.Size() != len(members) {
		return fmt.Errorf("set rank %d size %d, want %d %d", mine.Rank(), mine.Size(), want, len(members))
	}
	if got, want := even.String(), fmt.Sprintf("ProcessSet(process_set_id=1, ranks=%s, mpi_comm=None)", pyList(parity(size, 0))); got != want {
		return fmt.Errorf("String() = %q, want %q", got, want)
	}
	if n := len(r.ProcessSets()); n != 3 {
		return fmt.Errorf("%d process sets, want 3", n)
	}
	// The same names in both sets and in the global set, in flight
	// together, several rounds (the second and later hit each cache).
	for round := range 4 {
		var hs []*Handle
		var wants []float64
		for i := range 3 {
			name := fmt.Sprintf("g%d", i)
			v := float64(rank + 1 + i + round)
			h, err := r.AllreduceAsync(tensor.FromFloat64([]float64{v, v}), name, Sum, InProcessSet(mine))
			if err != nil {
				return err
			}
			hs = append(hs, h)
			wants = append(wants, sumOf(members, func(g int) float64 { return float64(g + 1 + i + round) }))
			hg, err := r.AllreduceAsync(tensor.FromFloat64([]float64{v}), name, Sum)
			if err != nil {
				return err
			}
			hs = append(hs, hg)
			wants = append(wants, sumOf(parity(size, 0), func(g int) float64 { return float64(g + 1 + i + round) })+
				sumOf(parity(size, 1), func(g int) float64 { return float64(g + 1 + i + round) }))
		}
		for k, h := range hs {
			if err := h.Wait(ctx); err != nil {
				return err
			}
			if got := h.Output().Float64s()[0]; got != wants[k] {
				return fmt.Errorf("round %d result %d: %v, want %v", round, k, got, wants[k])
			}
		}
	}
	if err := groupsInSet(ctx, r, mine); err != nil {
		return err
	}
	// Average divides by the set's size.
	avg, err := r.Allreduce(ctx, tensor.FromFloat64([]float64{float64(rank)}), "avg", Average, InProcessSet(mine))
	if err != nil {
		return err
	}
	if want := sumOf(members, func(g int) float64 { return float64(g) }) / float64(len(members)); avg.Float64s()[0] != want {
		return fmt.Errorf("average %v, want %v", avg.Float64s()[0], want)
	}
	// Broadcast from the set's last member, named by its global rank.
	root := members[len(members)-1]
	b, err := r.Broadcast(ctx, tensor.FromInt64([]int64{int64(rank * 10)}), root, "b", InProcessSet(mine))
	if err != nil {
		return err
	}
	if b.Int64s()[0] != int64(root*10) {
		return fmt.Errorf("broadcast from %d: %d", root, b.Int64s()[0])
	}
	// Allgather with rank+1 rows each, in set order.
	rows := make([]int64, rank+1)
	for i := range rows {
		rows[i] = int64(rank)
	}
	g, err := r.Allgather(ctx, tensor.FromInt64(rows, rank+1, 1), "ag", InProcessSet(mine))
	if err != nil {
		return err
	}
	var want []int64
	for _, m := range members {
		for range m + 1 {
			want = append(want, int64(m))
		}
	}
	if !slices.Equal(g.Int64s(), want) {
		return fmt.Errorf("allgather %v, want %v", g.Int64s(), want)
	}
	// Reducescatter of an odd number of rows: the set's own split.
	n := 2*len(members) + 1
	rs := make([]float64, n)
	for i := range rs {
		rs[i] = float64(i)
	}
	out, err := r.Reducescatter(ctx, tensor.FromFloat64(rs, n, 1), "rs", Sum, InProcessSet(mine))
	if err != nil {
		return err
	}
	sr := mine.Rank()
	lo := 0
	for k := range sr {
		lo += ReducescatterRows(n, len(members), k)
	}
	cnt := ReducescatterRows(n, len(members), sr)
	if out.Shape()[0] != cnt {
		return fmt.Errorf("reducescatter rows %d, want %d", out.Shape()[0], cnt)
	}
	for i, v := range out.Float64s() {
		if want := float64((lo + i) * len(members)); v != want {
			return fmt.Errorf("reducescatter[%d] %v, want %v", i, v, want)
		}
	}
	// Alltoall: one row to each member.
	at := make([]int64, len(members))
	for i := range at {
		at[i] = int64(rank*100 + i)
	}
	a, splits, err := r.Alltoall(ctx, tensor.FromInt64(at, len(members)), nil, "a2a", InProcessSet(mine))
	if err != nil {
		return err
	}
	for i, m := range members {
		if a.Int64s()[i] != int64(m*100+sr) || splits[i] != 1 {
			return fmt.Errorf("alltoall %v %v", a.Int64s(), splits)
		}
	}
	if err := r.Barrier(ctx, InProcessSet(mine)); err != nil {
		return err
	}
	// Join within the set: the set's last member joins at once, the
	// others reduce once more (it contributes zeros) and then join.
	last := members[len(members)-1]
	if rank != last {
		s, err := r.Allreduce(ctx, tensor.FromFloat64([]float64{1}), "j", Sum, InProcessSet(mine))
		if err != nil {
			return err
		}
		if want := float64(len(members) - 1); s.Float64s()[0] != want {
			return fmt.Errorf("allreduce beside a joined rank: %v, want %v", s.Float64s()[0], want)
		}
	}
	lj, err := r.Join(ctx, InProcessSet(mine))
	if err != nil {
		return err
	}
	// The last to join is one of the members that reduced first (in any
	// order among them), named by its global rank.
	if wantAny := members[:max(len(members)-1, 1)]; !slices.Contains(wantAny, lj) {
		return fmt.Errorf("join returned %d, want one of the global ranks %v", lj, wantAny)
	}
	// And the global set still works.
	s, err := r.Allreduce(ctx, tensor.FromFloat64([]float64{1}), "after", Sum)
	if err != nil {
		return err
	}
	if s.Float64s()[0] != float64(size) {
		return fmt.Errorf("global after: %v", s.Float64s()[0])
	}
	return nil
}

// groupsInSet runs the grouped operations and an AllreduceGroup within
// ps, under the same names in every set, and checks each result against
// the set's members.
func groupsInSet(ctx context.Context, r *Runtime, ps *ProcessSet) error {
	rank, members := r.Rank(), ps.Ranks()
	n := len(members)
	// A grouped allreduce: Average divides by the set's size.
	outs, err := r.GroupedAllreduce(ctx, []*tensor.Tensor{tensor.FromFloat64([]float64{float64(rank)}),
		tensor.FromInt64([]int64{int64(rank), 1})}, "grp", Sum, InProcessSet(ps))
	if err != nil {
		return fmt.Errorf("grouped allreduce: %w", err)
	}
	sum := sumOf(members, func(g int) float64 { return float64(g) })
	if outs[0].Float64s()[0] != sum || outs[1].Int64s()[0] != int64(sum) || outs[1].Int64s()[1] != int64(n) {
		return fmt.Errorf("grouped allreduce: %v %v, want %v and [%v %d]", outs[0].Float64s(), outs[1].Int64s(), sum, sum, n)
	}
	// An AllreduceGroup, two steps (the second from the set's cache).
	a, b := tensor.New(tensor.Float32, 3), tensor.New(tensor.Float32, 1)
	g, err := r.NewAllreduceGroup([]*tensor.Tensor{a, b}, []string{"ga", "gb"}, Average, InProcessSet(ps))
	if err != nil {
		return fmt.Errorf("allreduce group: %w", err)
	}
	defer g.Close()
	for step := range 2 {
		for i := range a.Float32s() {
			a.Float32s()[i] = float32(rank + step + i)
		}
		b.Float32s()[0] = float32(rank)
		h, err := g.Start()
		if err != nil {
			return fmt.Errorf("allreduce group step %d: %w", step, err)
		}
		if err := h.Wait(ctx); err != nil {
			return fmt.Errorf("allreduce group step %d: %w", step, err)
		}
		for i, v := range a.Float32s() {
			if want := float32(sum/float64(n)) + float32(step+i); v != want {
				return fmt.Errorf("allreduce group step %d: a[%d] = %v, want %v", step, i, v, want)
			}
		}
		if want := float32(sum / float64(n)); b.Float32s()[0] != want {
			return fmt.Errorf("allreduce group step %d: b = %v, want %v", step, b.Float32s()[0], want)
		}
	}
	// A grouped allgather: rank+1 rows and one row, in set order.
	rows := make([]int64, rank+1)
	for i := range rows {
		rows[i] = int64(rank)
	}
	gs, err := r.GroupedAllgather(ctx, []*tensor.Tensor{tensor.FromInt64(rows, rank+1), tensor.FromInt64([]int64{int64(rank * 10)}, 1)},
		"gag", InProcessSet(ps))
	if err != nil {
		return fmt.Errorf("grouped allgather: %w", err)
	}
	var want0, want1 []int64
	for _, m := range members {
		for range m + 1 {
			want0 = append(want0, int64(m))
		}
		want1 = append(want1, int64(m*10))
	}
	if !slices.Equal(gs[0].Int64s(), want0) || !slices.Equal(gs[1].Int64s(), want1) {
		return fmt.Errorf("grouped allgather: %v %v, want %v %v", gs[0].Int64s(), gs[1].Int64s(), want0, want1)
	}
	// A grouped reducescatter of n rows: one row each.
	in := make([]float64, n)
	for i := range in {
		in[i] = float64(i + rank)
	}
	rs, err := r.GroupedReducescatter(ctx, []*tensor.Tensor{tensor.FromFloat64(in, n, 1)}, "grs", Sum, InProcessSet(ps))
	if err != nil {
		return fmt.Errorf("grouped reducescatter: %w", err)
	}
	if want := float64(n*ps.Rank()) + sum; rs[0].Len() != 1 || rs[0].Float64s()[0] != want {
		return fmt.Errorf("grouped reducescatter: %v, want [%v]", rs[0].Float64s(), want)
	}
	return nil
}

func pyList(rs []int) string {
	s := "["
	for i, r := range rs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprint(r)
	}
	return s + "]"
}

// scenarioErrors: every process set error on every rank, each followed by a
// working collective.
func scenarioErrors(r *Runtime, even, odd *ProcessSet) error {
	ctx, cancel := psCtx()
	defer cancel()
	rank, size := r.Rank(), r.Size()
	works := func(step string) error { return worksAfter(ctx, r, step) }
	other := odd
	if rank%2 == 1 {
		other = even
	}
	x := tensor.FromFloat64([]float64{1})
	var pe *ProcessSetError
	if other.Size() > 0 {
		_, err := r.AllreduceAsync(x, "foreign", Sum, InProcessSet(other))
		if !errors.Is(err, ErrForeignProcessSet) || !errors.As(err, &pe) || pe.Code != ProcessSetErrorForeign {
			return fmt.Errorf("allreduce on a foreign set: %v", err)
		}
		if want := fmt.Sprintf("hvd: Allreduce: Rank %d is not a member of the provided process set.", rank); err.Error() != want {
			return fmt.Errorf("foreign set text %q, want %q", err.Error(), want)
		}
		if _, err := r.AllgatherAsync(x, "foreign", InProcessSet(other)); !errors.Is(err, ErrForeignProcessSet) {
			return fmt.Errorf("allgather on a foreign set: %v", err)
		}
	}
	if err := works("foreign"); err != nil {
		return err
	}
	stray := NewProcessSet(0)
	if _, err := r.AllreduceAsync(x, "unknown", Sum, InProcessSet(stray)); !errors.Is(err, ErrUnknownProcessSet) ||
		err.Error() != "hvd: Allreduce: Process set provided does not exist, or has not been registered." {
		return fmt.Errorf("allreduce on an unregistered set: %v", err)
	}
	if err := works("unknown"); err != nil {
		return err
	}
	mine := even
	if rank%2 == 1 {
		mine = odd
	}
	if _, err := r.AllreduceAsync(tensor.FromFloat32([]float32{1}), "ada", Adasum, InProcessSet(mine)); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), AdasumProcessSetText) {
		return fmt.Errorf("adasum on a non-global set: %v", err)
	}
	if err := works("adasum"); err != nil {
		return err
	}
	outside := -1
	for g := range size {
		if mine.Rank() >= 0 && !slices.Contains(mine.Ranks(), g) {
			outside = g
			break
		}
	}
	if outside >= 0 {
		if _, err := r.BroadcastAsync(x, outside, "root", InProcessSet(mine)); !errors.Is(err, ErrInvalidArgument) {
			return fmt.Errorf("broadcast rooted outside the set: %v", err)
		}
	}
	if _, err := r.AllgatherAsync(x, "scaled", Prescale(2)); !errors.Is(err, ErrInvalidArgument) {
		return fmt.Errorf("allgather with a prescale: %v", err)
	}
	if _, err := r.AddProcessSet(ctx, []int{0}); !errors.Is(err, ErrDynamicProcessSets) || !errors.As(err, &pe) ||
		pe.Code != ProcessSetErrorDynamic || !strings.Contains(err.Error(), "Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow adding process sets after Horovod initialization") {
		return fmt.Errorf("AddProcessSet without dynamic sets: %v", err)
	}
	if err := works("add"); err != nil {
		return err
	}
	if err := r.RemoveProcessSet(ctx, mine); !errors.Is(err, ErrDynamicProcessSets) ||
		!strings.Contains(err.Error(), "to allow removing process sets") {
		return fmt.Errorf("RemoveProcessSet without dynamic sets: %v", err)
	}
	return works("end")
}

// scenarioDynamic: sets added and removed while another set works; the
// registration errors on every rank, each followed by a working collective.
func scenarioDynamic(r *Runtime) error {
	ctx, cancel := psCtx()
	defer cancel()
	rank, size := r.Rank(), r.Size()
	works := func(step string) error { return worksAfter(ctx, r, step) }
	lowRanks := []int{1, 0} // any order
	if size == 2 {
		lowRanks = []int{0} // [0 1] is the global set
	}
	low, err := r.AddProcessSet(ctx, lowRanks)
	if err != nil {
		return err
	}
	slices.Sort(lowRanks)
	if low.ID() != 1 || !slices.Equal(low.Ranks(), lowRanks) || low.Included() != slices.Contains(lowRanks, rank) {
		return fmt.Errorf("added %v included %v", low, low.Included())
	}
	// The low set reduces in a loop (a fixed number of times, the same on
	// its members) while every rank adds and removes other sets.
	var wg sync.WaitGroup
	var loopErr error
	if low.Included() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				s, err := r.Allreduce(ctx, tensor.FromFloat64([]float64{float64(i)}), "busy", Sum, InProcessSet(low))
				if err != nil {
					loopErr = err
					return
				}
				if s.Float64s()[0] != float64(len(lowRanks)*i) {
					loopErr = fmt.Errorf("busy %d: %v", i, s.Float64s()[0])
					return
				}
			}
		}()
	}
	high, err := r.AddProcessSet(ctx, []int{size - 2, size - 1})
	if size == 2 {
		// The global set's ranks: a duplicate, refused on every rank.
		if !errors.Is(err, ErrExistingProcessSet) {
			return fmt.Errorf("duplicate add: %v", err)
		}
		high = low
	} else if err != nil {
		return err
	}
	if high != low {
		if high.ID() != 2 {
			return fmt.Errorf("second set id %d", high.ID())
		}
		if high.Included() {
			s, err := r.Allreduce(ctx, tensor.FromFloat64([]float64{float64(rank)}), "busy", Sum, InProcessSet(high))
			if err != nil {
				return err
			}
			if s.Float64s()[0] != float64(2*size-3) {
				return fmt.Errorf("high set sum %v", s.Float64s()[0])
			}
		}
		if err := r.RemoveProcessSet(ctx, high); err != nil {
			return err
		}
		if high.Included() || high.ID() != 2 {
			return fmt.Errorf("after removal: %v included %v", high, high.Included())
		}
		if _, err := r.AllreduceAsync(tensor.FromFloat64([]float64{1}), "gone", Sum, InProcessSet(high)); !errors.Is(err, ErrUnknownProcessSet) {
			return fmt.Errorf("allreduce on a removed set: %v", err)
		}
		if err := r.RemoveProcessSet(ctx, high); !errors.Is(err, ErrUnknownProcessSet) {
			return fmt.Errorf("second removal: %v", err)
		}
		// The freed id is reused.
		again, err := r.AddProcessSet(ctx, []int{0, size - 1})
		if err != nil {
			return err
		}
		if again.ID() != 2 {
			return fmt.Errorf("re-added set has id %d, want 2", again.ID())
		}
	}
	if err := works("adds"); err != nil {
		return err
	}
	// A duplicate of an existing set, on every rank.
	var pe *ProcessSetError
	if _, err := r.AddProcessSet(ctx, lowRanks); !errors.Is(err, ErrExistingProcessSet) || !errors.As(err, &pe) ||
		pe.Code != ProcessSetErrorExisting ||
		!strings.Contains(err.Error(), fmt.Sprintf("Attempted to add a duplicate process set: ProcessSet(process_set_id=None, ranks=%s, mpi_comm=None)", pyList(lowRanks))) {
		return fmt.Errorf("duplicate add: %v", err)
	}
	if err := works("duplicate"); err != nil {
		return err
	}
	// Ranks that disagree: every rank gets the mismatch.
	if _, err := r.AddProcessSet(ctx, []int{rank}); size > 1 && !errors.Is(err, ErrProcessSetInit) {
		return fmt.Errorf("mismatched add: %v", err)
	}
	if err := works("mismatch"); err != nil {
		return err
	}
	if err := r.RemoveProcessSet(ctx, r.GlobalProcessSet()); !errors.Is(err, ErrInvalidArgument) {
		return fmt.Errorf("removing the global set: %v", err)
	}
	if _, err := r.AddProcessSet(ctx, []int{size}); !errors.Is(err, ErrInvalidArgument) {
		return fmt.Errorf("adding an out-of-range rank: %v", err)
	}
	wg.Wait()
	if loopErr != nil {
		return fmt.Errorf("the busy set: %w", loopErr)
	}
	// Removing a set fails what is pending in it, on its members.
	if err := r.RemoveProcessSet(ctx, low); err != nil {
		return err
	}
	return works("end")
}

// worksAfter checks that a global allreduce works after step.
func worksAfter(ctx context.Context, r *Runtime, step string) error {
	s, err := r.Allreduce(ctx, tensor.FromFloat64([]float64{1}), "works."+step, Sum)
	if err != nil {
		return fmt.Errorf("after %s: %w", step, err)
	}
	if s.Float64s()[0] != float64(r.Size()) {
		return fmt.Errorf("after %s: sum %v", step, s.Float64s()[0])
	}
	return nil
}
