package cycle

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/negotiate"
	"github.com/gohorovod/gohorovod/runtime/internal/stall"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// perform carries out, for every rank at once, the collective that each
// rank's step asks for, as a transport would: it fails when the ranks ask
// for different collectives or give counts that do not match.
func perform(steps []*Step) error {
	op := steps[0].Op
	for r, st := range steps {
		if st.Op != op || st.What != steps[0].What {
			return fmt.Errorf("rank %d performs %d (%s), rank 0 %d (%s)", r, st.Op, st.What, op, steps[0].What)
		}
	}
	switch op {
	case AllgatherInts:
		var all []int64
		for _, st := range steps {
			all = append(all, st.SendInts...)
		}
		for r, st := range steps {
			if len(st.RecvInts) != len(all) {
				return fmt.Errorf("rank %d receives %d values of %d", r, len(st.RecvInts), len(all))
			}
			copy(st.RecvInts, all)
		}
	case AllgatherBytes, GatherBytes:
		var all []byte
		for r, st := range steps {
			if st.Counts[r] != len(st.Send) {
				return fmt.Errorf("rank %d sends %d bytes, counts say %d", r, len(st.Send), st.Counts[r])
			}
			all = append(all, st.Send...)
		}
		for r, st := range steps {
			if op == GatherBytes && r != st.Root {
				if st.Recv != nil {
					return fmt.Errorf("rank %d receives in a gather to rank %d", r, st.Root)
				}
				continue
			}
			if len(st.Recv) != len(all) {
				return fmt.Errorf("rank %d receives %d bytes of %d", r, len(st.Recv), len(all))
			}
			copy(st.Recv, all)
		}
	case BcastInts:
		for _, st := range steps {
			copy(st.SendInts, steps[st.Root].SendInts)
		}
	case BcastBytes:
		for r, st := range steps {
			if len(st.Send) != len(steps[st.Root].Send) {
				return fmt.Errorf("rank %d receives %d bytes of %d", r, len(st.Send), len(steps[st.Root].Send))
			}
			copy(st.Send, steps[st.Root].Send)
		}
	default:
		return fmt.Errorf("unknown op %d", op)
	}
	return nil
}

// runSteps drives every rank's negotiation to its end in lock step, at now.
func runSteps(now time.Time, negs []*Negotiation) error {
	for {
		steps := make([]*Step, len(negs))
		done := 0
		for r, n := range negs {
			steps[r] = n.Next()
			if steps[r] == nil {
				done++
			}
		}
		if done == len(negs) {
			return nil
		}
		if done != 0 {
			return fmt.Errorf("%d of %d ranks have finished negotiating", done, len(negs))
		}
		if err := perform(steps); err != nil {
			return err
		}
		for r, n := range negs {
			if err := n.Done(now); err != nil {
				return fmt.Errorf("rank %d: %w", r, err)
			}
		}
	}
}

func newNegotiations(n int) []*Negotiation {
	negs := make([]*Negotiation, n)
	for r := range negs {
		var coord *negotiate.Coordinator
		if r == 0 {
			coord = negotiate.New(n)
		}
		negs[r] = NewNegotiation(r, n, coord, nil)
	}
	return negs
}

func req(r int, name string, shape ...int64) wire.Request {
	return wire.Request{Rank: int32(r), Type: wire.Allreduce, DType: tensor.Float32, Op: tensor.Sum, Name: name,
		Device: wire.CPU, Shape: shape, Prescale: 1, Postscale: 1}
}

// TestNegotiation: the steps are the four collectives of the slow path;
// every rank ends with rank 0's responses, in order, once every rank has
// submitted a name, and rank 0's coordinator events say which names
// started and finished waiting.
func TestNegotiation(t *testing.T) {
	const n = 3
	negs := newNegotiations(n)
	now := time.Unix(5, 0)
	// Cycle one: every rank submits a, only rank 1 b.
	for r, ng := range negs {
		reqs := []wire.Request{req(r, "allreduce.a", 4)}
		if r == 1 {
			reqs = append(reqs, req(r, "allreduce.b", 2))
		}
		items := make([]Item, len(reqs))
		for i := range reqs {
			items[i] = Item{Req: &reqs[i], Bit: -1}
		}
		ng.Begin(items, []int{0, len(items) - 1}[:len(items)], false)
	}
	var ops []Op
	for {
		st := negs[0].Next()
		if st == nil {
			break
		}
		op, what := st.Op, st.What // st is the negotiation's, and Done replaces it
		ops = append(ops, op)
		steps := make([]*Step, n)
		for r, ng := range negs {
			steps[r] = ng.Next()
		}
		if err := perform(steps); err != nil {
			t.Fatal(err)
		}
		var events []string
		for r, ng := range negs {
			if err := ng.Done(now); err != nil {
				t.Fatal(err)
			}
			for _, ev := range ng.Events() {
				events = append(events, fmt.Sprintf("%d:%d:%s", r, ev.Kind, ev.Name))
			}
		}
		if op == GatherBytes && len(events) == 0 {
			t.Errorf("no coordinator events after the gather")
		}
		if op != GatherBytes && len(events) != 0 {
			t.Errorf("events %v after %s", events, what)
		}
	}
	if want := []Op{AllgatherInts, GatherBytes, BcastInts, BcastBytes}; !slices.Equal(ops, want) {
		t.Fatalf("steps %v, want %v", ops, want)
	}
	for r, ng := range negs {
		got := ng.Responses()
		if len(got.Responses) != 1 || got.Responses[0].Names[0] != "allreduce.a" || got.Shutdown {
			t.Errorf("rank %d: responses %+v", r, got)
		}
	}
	// Cycle two: the others submit b, and rank 2 asks to stop.
	for r, ng := range negs {
		var items []Item
		if r != 1 {
			rq := req(r, "allreduce.b", 2)
			items = []Item{{Req: &rq, Bit: -1}}
		}
		ng.Begin(items, []int{0}[:len(items)], r == 2)
	}
	if err := runSteps(now, negs); err != nil {
		t.Fatal(err)
	}
	for r, ng := range negs {
		got := ng.Responses()
		if len(got.Responses) != 1 || got.Responses[0].Names[0] != "allreduce.b" || !got.Shutdown {
			t.Errorf("rank %d: responses %+v", r, got)
		}
	}
}

// TestNegotiationBadRequests: rank 0 reports a rank whose requests do not
// decode, naming it.
func TestNegotiationBadRequests(t *testing.T) {
	negs := newNegotiations(2)
	for _, ng := range negs {
		ng.Begin(nil, nil, false)
	}
	negs[1].send = []byte{7}
	negs[1].mine[0] = 1
	steps := []*Step{negs[0].Next(), negs[1].Next()}
	if err := perform(steps); err != nil {
		t.Fatal(err)
	}
	for _, ng := range negs {
		if err := ng.Done(time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	steps = []*Step{negs[0].Next(), negs[1].Next()}
	if err := perform(steps); err != nil {
		t.Fatal(err)
	}
	err := negs[0].Done(time.Time{})
	if err == nil || !strings.HasPrefix(err.Error(), "requests from rank 1: ") {
		t.Fatalf("Done = %v, want the requests of rank 1 refused", err)
	}
	if negs[0].Next() != nil {
		t.Error("a failed negotiation asks for more")
	}
}

// TestGather: every rank's bytes, by rank, on every rank.
func TestGather(t *testing.T) {
	mine := [][]byte{[]byte("zero"), nil, []byte("two!!")}
	gs := make([]*Gather, len(mine))
	for r := range gs {
		gs[r] = NewGather(len(mine), mine[r])
	}
	for gs[0].Next() != nil {
		steps := make([]*Step, len(gs))
		for r, g := range gs {
			steps[r] = g.Next()
		}
		if err := perform(steps); err != nil {
			t.Fatal(err)
		}
		for _, g := range gs {
			g.Done()
		}
	}
	for r, g := range gs {
		got := g.Result()
		if len(got) != 3 || string(got[0]) != "zero" || len(got[1]) != 0 || string(got[2]) != "two!!" {
			t.Errorf("rank %d: %q", r, got)
		}
	}
}

// TestStalled: rank 0 reports a name that rank 1 submitted and rank 0 has
// not, as a warning, then (past the shutdown time) as a stop: of this
// cycle on the global set, of the global set's next cycle on another.
func TestStalled(t *testing.T) {
	for _, set := range []int{0, 3} {
		insp, _ := stall.New(stall.Config{Warn: time.Second, Shutdown: 3 * time.Second})
		negs := newNegotiations(2)
		negs[0].stall = insp
		t0 := time.Unix(100, 0)
		if _, _, ok := negs[0].Stalled(t0, set); ok {
			t.Fatal("a report before anything was submitted")
		}
		rq := req(1, "allreduce.late", 1)
		negs[0].Begin(nil, nil, false)
		negs[1].Begin([]Item{{Req: &rq, Bit: -1}}, []int{0}, false)
		if err := runSteps(t0, negs); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := negs[1].Stalled(t0.Add(time.Hour), set); ok {
			t.Fatal("rank 1 reported")
		}
		msg, act, ok := negs[0].Stalled(t0.Add(2*time.Second), set)
		if !ok || act != StallWarn || !strings.Contains(msg, "allreduce.late") ||
			strings.HasPrefix(msg, "process set") != (set != 0) {
			t.Fatalf("set %d: Stalled = %q, %v, %v; want a warning", set, msg, act, ok)
		}
		want := StallStop
		if set != 0 {
			want = StallStopNext
		}
		if _, act, ok := negs[0].Stalled(t0.Add(10*time.Second), set); !ok || act != want {
			t.Fatalf("set %d: Stalled = %v, %v; want %v", set, act, ok, want)
		}
	}
}
