package runtime

import (
	"testing"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// The loop hands pushFront a slice it reuses every cycle. The FIFO must not
// share that slice's array: adds made between cycles would land in it and be
// overwritten by the loop's next use (a lost request, and a rank that waits
// for ever).
func TestQueuePushFrontDoesNotAliasCallerSlice(t *testing.T) {
	var q queue
	q.reset()
	mk := func(name string) *entry { return &entry{req: wire.Request{Name: name}, h: newHandle(1)} }
	a, b, c := mk("a"), mk("b"), mk("c")
	back := make([]*entry, 0, 4) // the loop's slice, reused every cycle

	// Cycle 1: a could not be performed yet and goes back to the FIFO.
	back = append(back[:0], a)
	q.pushFront(back)
	// Cycle 2 takes the FIFO; a user submits b while the cycle runs; the
	// cycle then puts c back through the same slice.
	msgs := q.pop(nil)
	if len(msgs) != 1 || msgs[0] != a {
		t.Fatalf("first pop: got %d entries, want [a]", len(msgs))
	}
	if err := q.add(b); err != nil {
		t.Fatal(err)
	}
	back = append(back[:0], c)
	q.pushFront(back)

	got := q.pop(nil)
	names := make([]string, len(got))
	for i, e := range got {
		names[i] = e.req.Name
	}
	if len(got) != 2 || got[0] != c || got[1] != b {
		t.Fatalf("FIFO holds %v, want [c b]", names)
	}
}

func TestQueuePushFrontKeepsOrder(t *testing.T) {
	var q queue
	q.reset()
	mk := func(name string) *entry { return &entry{req: wire.Request{Name: name}, h: newHandle(1)} }
	x, y, z := mk("x"), mk("y"), mk("z")
	if err := q.add(z); err != nil {
		t.Fatal(err)
	}
	q.pushFront([]*entry{x, y})
	got := q.pop(nil)
	if len(got) != 3 || got[0] != x || got[1] != y || got[2] != z {
		t.Fatalf("got %d entries in the wrong order", len(got))
	}
}
