package runtime

// The timeline tests' workload and checks, shared by the in-memory tests
// (timeline_test.go) and the MPI ones (timeline_mpi_test.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/internal/timeline"
	"github.com/gohorovod/gohorovod/tensor"
)

// timelineStep is one step of the timeline tests' workload on one rank: a
// single allreduce, a fused group, a fused group reduced in two pieces of
// the fusion buffer, an allgather, a broadcast and an allreduce whose
// shapes disagree (a negotiation error).
func timelineStep(ctx context.Context, r *Runtime, rank int) error {
	if _, err := r.Allreduce(ctx, fill(tensor.Float32, 4, 1), "tl.single", Sum); err != nil {
		return err
	}
	small := []*tensor.Tensor{fill(tensor.Float32, 2, 1), fill(tensor.Float32, 3, 1), fill(tensor.Float32, 5, 1)}
	if _, err := r.GroupedAllreduce(ctx, small, "tl.group", Sum); err != nil {
		return err
	}
	// 8 tensors of 48 KiB: fused (each is below the 64 KiB limit on fused
	// tensors), copied, reduced and copied back in two 256 KiB pieces.
	big := make([]*tensor.Tensor, 8)
	for i := range big {
		big[i] = fill(tensor.Float32, 12<<10, 1)
	}
	if _, err := r.GroupedAllreduce(ctx, big, "tl.big", Average); err != nil {
		return err
	}
	if _, err := r.Allgather(ctx, fill(tensor.Float32, rank+1, float64(rank)), "tl.gather"); err != nil {
		return err
	}
	if _, err := r.Broadcast(ctx, fill(tensor.Float32, 3, float64(rank)), 0, "tl.bcast"); err != nil {
		return err
	}
	var oe *OpError
	if _, err := r.Allreduce(ctx, fill(tensor.Float32, rank+1, 1), "tl.bad", Sum); !errors.As(err, &oe) {
		return fmt.Errorf("mismatched shapes: got %v, want an OpError", err)
	}
	return nil
}

// timelineRun is the timeline tests' workload on one rank, started with
// HOROVOD_TIMELINE naming a first file (rank 0 writes it): two steps (the
// second from the response cache); an allreduce that the other ranks
// submit before StartTimeline switches to the file second and rank 0
// after, so that its negotiation spans both files; two more steps;
// StopTimeline (twice: the second does nothing); a step with no timeline,
// which leaves the second file as it was.
func timelineRun(ctx context.Context, r *Runtime, rank int, second string) error {
	for range 2 {
		if err := timelineStep(ctx, r, rank); err != nil {
			return err
		}
	}
	var h *Handle
	var err error
	if rank != 0 {
		if h, err = r.AllreduceAsync(fill(tensor.Float32, 2, 1), "tl.straddle", Sum); err != nil {
			return err
		}
	}
	// The other ranks' requests for tl.straddle reach rank 0 no later
	// than their barrier requests.
	if err := r.Barrier(ctx); err != nil {
		return err
	}
	if err := r.StartTimeline(second, true); err != nil {
		return err
	}
	if rank == 0 {
		if h, err = r.AllreduceAsync(fill(tensor.Float32, 2, 1), "tl.straddle", Sum); err != nil {
			return err
		}
	}
	if err := h.Wait(ctx); err != nil {
		return err
	}
	for range 2 {
		if err := timelineStep(ctx, r, rank); err != nil {
			return err
		}
	}
	if err := r.StopTimeline(); err != nil {
		return err
	}
	if err := r.StopTimeline(); err != nil {
		return fmt.Errorf("StopTimeline with no timeline: %w", err)
	}
	var before []byte
	if rank == 0 {
		if before, err = os.ReadFile(second); err != nil {
			return err
		}
	}
	if err := timelineStep(ctx, r, rank); err != nil {
		return err
	}
	if rank == 0 {
		after, err := os.ReadFile(second)
		if err != nil {
			return err
		}
		if !bytes.Equal(before, after) {
			return errors.New("the timeline changed after StopTimeline")
		}
	}
	return nil
}

// unit is a top-level span of a row with the spans inside it.
type unit struct {
	timeline.Span
	inner []timeline.Span
}

// units splits a row into its top-level spans; a row's spans are in the
// order they ended, so a span's inner spans come just before it.
func units(t *testing.T, row *timeline.Row) []unit {
	t.Helper()
	var out []unit
	var inner []timeline.Span
	for _, s := range row.Spans {
		if s.Depth > 0 {
			inner = append(inner, s)
			continue
		}
		out = append(out, unit{Span: s, inner: inner})
		inner = nil
	}
	if len(inner) > 0 {
		t.Errorf("%s: spans %v outside any top-level span", row.Name, names(inner))
	}
	return out
}

func names(spans []timeline.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func readTimeline(t *testing.T, path string) *timeline.Trace {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := timeline.Read(f)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(path), err)
	}
	return tr
}

// checkRow checks a row's top-level spans against want (their names, in
// order) and what lies inside them: the ranks' arrivals inside each
// negotiation (ranks lists the arrivals expected in the NEGOTIATE spans, in
// order), the op's activities inside an op span (acts), and each QUEUE span
// ending where the op span after it starts.
func checkRow(t *testing.T, tr *timeline.Trace, file, name string, want []string, ranks [][]int, acts map[string][]string) {
	t.Helper()
	row := tr.Row(name)
	if row == nil {
		t.Errorf("%s: no row for %s", file, name)
		return
	}
	us := units(t, row)
	var got []string
	for _, u := range us {
		got = append(got, u.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: %s: top-level spans %q, want %q", file, name, got, want)
		return
	}
	neg := 0
	for i, u := range us {
		_, numeric := strconv.Atoi(u.Name)
		switch {
		case numeric == nil:
			// A rank's arrival outside any span: its negotiation began
			// before this file was opened.
			if len(u.inner) > 0 || u.Begin != u.End {
				t.Errorf("%s: %s: arrival %+v", file, name, u)
			}
		case strings.HasPrefix(u.Name, "NEGOTIATE_"):
			var rs []int
			for _, s := range u.inner {
				r, err := strconv.Atoi(s.Name)
				if err != nil || s.Begin != s.End {
					t.Errorf("%s: %s: %+v inside a negotiation", file, name, s)
				}
				rs = append(rs, r)
			}
			slices.Sort(rs)
			if neg < len(ranks) && !slices.Equal(rs, ranks[neg]) {
				t.Errorf("%s: %s: negotiation %d has ranks %v, want %v", file, name, neg, rs, ranks[neg])
			}
			neg++
		case u.Name == timeline.Queue:
			if len(u.inner) > 0 || i+1 == len(us) || us[i+1].Begin != u.End {
				t.Errorf("%s: %s: QUEUE [%d,%d] not followed at once by its operation", file, name, u.Begin, u.End)
			}
		default:
			if w := acts[u.Name]; !slices.Equal(names(u.inner), w) {
				t.Errorf("%s: %s: %s has activities %q, want %q", file, name, u.Name, names(u.inner), w)
			}
			if u.Args["dtype"] == nil || u.Args["shape"] == nil {
				t.Errorf("%s: %s: %s ends without dtype and shape: %v", file, name, u.Name, u.Args)
			}
		}
	}
}

// checkTimelineFiles validates the two files timelineRun produced on
// size ranks and checks each row's spans.
func checkTimelineFiles(t *testing.T, first, second string, size int) {
	t.Helper()
	all := make([]int, size)
	for i := range all {
		all[i] = i
	}
	acts := map[string][]string{
		"ALLREDUCE": {"MPI_ALLREDUCE"},
		"ALLGATHER": {"MPI_ALLGATHER"},
		"BROADCAST": {"MPI_BCAST"},
	}
	fused := map[string][]string{"ALLREDUCE": {"MEMCPY_IN_FUSION_BUFFER", "MPI_ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER"}}
	negotiated := []string{"NEGOTIATE_ALLREDUCE", "ALLREDUCE", "QUEUE", "ALLREDUCE"}
	cached := []string{"QUEUE", "ALLREDUCE", "QUEUE", "ALLREDUCE"}

	for _, f := range []struct {
		path   string
		steps  []string // the spans of a name reduced in every step
		ranks  [][]int  // the arrivals in those negotiations
		gather []string
	}{
		{first, negotiated, [][]int{all}, []string{"NEGOTIATE_ALLGATHER", "ALLGATHER", "QUEUE", "ALLGATHER"}},
		{second, cached, nil, []string{"QUEUE", "ALLGATHER", "QUEUE", "ALLGATHER"}},
	} {
		file := filepath.Base(f.path)
		tr := readTimeline(t, f.path)
		if tr.Cycles == 0 {
			t.Errorf("%s: no CYCLE_START", file)
		}
		checkRow(t, tr, file, "allreduce.tl.single", f.steps, f.ranks, acts)
		for i := range 3 {
			checkRow(t, tr, file, fmt.Sprintf("allreduce.tl.group_%dof3", i+1), f.steps, f.ranks, fused)
		}
		for i := range 8 {
			checkRow(t, tr, file, fmt.Sprintf("allreduce.tl.big_%dof8", i+1), f.steps, f.ranks, fused)
		}
		checkRow(t, tr, file, "allgather.tl.gather", f.gather, f.ranks, acts)
		// Broadcasts are never cached: each is negotiated.
		checkRow(t, tr, file, "broadcast.tl.bcast", []string{"NEGOTIATE_BROADCAST", "BROADCAST", "NEGOTIATE_BROADCAST", "BROADCAST"},
			[][]int{all, all}, acts)
		// Shapes that disagree: a negotiation in each step, no operation.
		checkRow(t, tr, file, "allreduce.tl.bad", []string{"NEGOTIATE_ALLREDUCE", "NEGOTIATE_ALLREDUCE"}, [][]int{all, all}, nil)
	}
	// tl.straddle's negotiation began in the first file, which shows the
	// other ranks' arrivals, and ended in the second, which shows rank 0's
	// and the operation.
	others := all[1:]
	checkRow(t, readTimeline(t, first), "first", "allreduce.tl.straddle", []string{"NEGOTIATE_ALLREDUCE"}, [][]int{others}, nil)
	checkRow(t, readTimeline(t, second), "second", "allreduce.tl.straddle", []string{"0", "ALLREDUCE"}, nil, acts)
}

// lockedBuffer is a bytes.Buffer safe for the ranks' loggers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
