package negotiate

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

func ar(rank int32, name string, shape ...int64) wire.Request {
	return wire.Request{Rank: rank, Type: wire.Allreduce, DType: tensor.Float32, Name: name, Device: wire.CPU,
		Shape: shape, Prescale: 1, Postscale: 1, Op: wire.Sum}
}

func add(t *testing.T, c *Coordinator, rank int, reqs ...wire.Request) {
	t.Helper()
	if err := c.Add(rank, &wire.RequestList{Requests: reqs}); err != nil {
		t.Fatal(err)
	}
}

func names(l wire.ResponseList) []string {
	var out []string
	for _, r := range l.Responses {
		out = append(out, strings.Join(r.Names, "+")+":"+r.Type.String())
	}
	return out
}

func TestReadinessAndOrder(t *testing.T) {
	c := New(3)
	// Cycle 1: not every rank has submitted anything.
	add(t, c, 0, ar(0, "a", 4), ar(0, "b", 2))
	add(t, c, 1, ar(1, "b", 2))
	if got := c.Responses(); len(got.Responses) != 0 {
		t.Fatalf("responses before every rank is ready: %v", names(got))
	}
	// Cycle 2: rank 2 submits b then a; readiness order is b (completed by
	// rank 2's first request) then a.
	add(t, c, 0)
	add(t, c, 1, ar(1, "a", 4))
	add(t, c, 2, ar(2, "b", 2), ar(2, "a", 4))
	got := c.Responses()
	want := []string{"b:ALLREDUCE", "a:ALLREDUCE"}
	if !reflect.DeepEqual(names(got), want) {
		t.Fatalf("got %v, want %v", names(got), want)
	}
	if got.Responses[1].Sizes[0] != 4 || !reflect.DeepEqual(got.Responses[1].Shapes[0], []int64{4}) {
		t.Fatalf("sizes/shapes: %+v", got.Responses[1])
	}
	if len(c.Pending()) != 0 {
		t.Fatalf("pending after completion: %v", c.Pending())
	}
	// A name seen again later is negotiated afresh.
	for r := int32(0); r < 3; r++ {
		add(t, c, int(r), ar(r, "a", 4))
	}
	if got := names(c.Responses()); !reflect.DeepEqual(got, []string{"a:ALLREDUCE"}) {
		t.Fatalf("second round: %v", got)
	}
}

func TestValidationErrors(t *testing.T) {
	base := func(r int32) wire.Request { return ar(r, "t", 17, 17, 17) }
	tests := []struct {
		name string
		mod  func(*wire.Request)
		want string
	}{
		{"dtype", func(r *wire.Request) { r.DType = tensor.Float64 },
			"Mismatched data types: One rank had type float32, but another rank had type float64."},
		{"op", func(r *wire.Request) { r.Type = wire.Allgather },
			"Mismatched operations: One rank did an ALLREDUCE, but another rank did an ALLGATHER."},
		{"shape", func(r *wire.Request) { r.Shape = []int64{18, 18, 18} },
			"Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [17, 17, 17], but another rank sent a tensor of shape [18, 18, 18]."},
		{"scale", func(r *wire.Request) { r.Postscale = 0.5 },
			"Mismatched prescale and/or postscale factors: One rank sent factors (1, 1), but another rank sent factors (1, 0.5)."},
		{"reduce op", func(r *wire.Request) { r.Op = wire.Max },
			"Mismatched reduction operation: One rank sent reduction op 1, but another rank sent reduction op 4."},
		{"device", func(r *wire.Request) { r.Device = 0 },
			"Mismatched ALLREDUCE CPU/GPU device selection: One rank specified device CPU, but another rank specified device GPU."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(2)
			r1 := base(1)
			tt.mod(&r1)
			add(t, c, 0, base(0))
			add(t, c, 1, r1)
			got := c.Responses()
			if len(got.Responses) != 1 || got.Responses[0].Type != wire.Error {
				t.Fatalf("want one error response, got %+v", got)
			}
			if got.Responses[0].Error != tt.want {
				t.Fatalf("error text\n got %q\nwant %q", got.Responses[0].Error, tt.want)
			}
			if got.Responses[0].Names[0] != "t" {
				t.Fatalf("error names %v", got.Responses[0].Names)
			}
		})
	}
}

func TestGatherShapesAndRoot(t *testing.T) {
	mk := func(r int32, typ wire.RequestType, shape ...int64) wire.Request {
		q := ar(r, "g", shape...)
		q.Type = typ
		return q
	}
	tests := []struct {
		name   string
		r0, r1 wire.Request
		want   string // "" = success
	}{
		{"allgather ragged dim 0", mk(0, wire.Allgather, 2, 3), mk(1, wire.Allgather, 5, 3), ""},
		{"allgather rank", mk(0, wire.Allgather, 2, 3), mk(1, wire.Allgather, 2),
			"Mismatched ALLGATHER tensor shapes: One rank sent a tensor of rank 2, but another rank sent a tensor of rank 1."},
		{"allgather dim", mk(0, wire.Allgather, 2, 10), mk(1, wire.Allgather, 2, 20),
			"Mismatched ALLGATHER tensor shapes: One rank sent a tensor with dimension 1 equal to 10, but another rank sent a tensor with dimension 1 equal to 20."},
		{"alltoall scalar", mk(0, wire.Alltoall), mk(1, wire.Alltoall),
			"Process-set rank zero tried to ALLTOALL a rank-zero tensor."},
		{"broadcast root", mk(0, wire.Broadcast, 3), func() wire.Request { q := mk(1, wire.Broadcast, 3); q.Root = 1; return q }(),
			"Mismatched BROADCAST root ranks: One rank specified root rank 0, but another rank specified root rank 1."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(2)
			add(t, c, 0, tt.r0)
			add(t, c, 1, tt.r1)
			got := c.Responses().Responses[0]
			if tt.want == "" {
				if got.Type == wire.Error {
					t.Fatalf("unexpected error %q", got.Error)
				}
				if !reflect.DeepEqual(got.Sizes, []int64{2, 5}) {
					t.Fatalf("allgather sizes %v", got.Sizes)
				}
				return
			}
			if got.Error != tt.want {
				t.Fatalf("error\n got %q\nwant %q", got.Error, tt.want)
			}
		})
	}
}

func TestJoin(t *testing.T) {
	c := New(3)
	join := func(r int32) wire.Request { return wire.Request{Rank: r, Type: wire.Join, Name: JoinName} }
	// Rank 2 joins; ranks 0 and 1 allreduce "x", which completes without it.
	add(t, c, 2, join(2))
	add(t, c, 0, ar(0, "x", 3))
	if got := c.Responses(); len(got.Responses) != 0 {
		t.Fatalf("early: %v", names(got))
	}
	add(t, c, 1, ar(1, "x", 3))
	got := c.Responses()
	if !reflect.DeepEqual(names(got), []string{"x:ALLREDUCE"}) {
		t.Fatalf("got %v", names(got))
	}
	// A pending name becomes ready when the missing rank joins.
	add(t, c, 0, ar(0, "y", 1))
	c.Responses()
	add(t, c, 1, join(1))
	got = c.Responses()
	if !reflect.DeepEqual(names(got), []string{"y:ALLREDUCE"}) {
		t.Fatalf("after join of the missing rank: %v", names(got))
	}
	// Broadcast while a join is active is an error.
	b := ar(0, "bc", 2)
	b.Type = wire.Broadcast
	add(t, c, 0, b)
	got = c.Responses()
	if len(got.Responses) != 1 || got.Responses[0].Error != "Broadcast is not supported with Join at this time." {
		t.Fatalf("broadcast during join: %+v", got)
	}
	// Rank 0 joins last: Join response with last joined rank 0, state reset.
	add(t, c, 0, join(0))
	got = c.Responses()
	if len(got.Responses) != 1 || got.Responses[0].Type != wire.ResponseType(wire.Join) || got.Responses[0].LastJoinedRank != 0 {
		t.Fatalf("join response: %+v", got)
	}
	if c.JoinedCount() != 0 {
		t.Fatalf("joined count not reset: %d", c.JoinedCount())
	}
}

func TestShutdownAndErrors(t *testing.T) {
	c := New(2)
	if err := c.Add(0, &wire.RequestList{Shutdown: true}); err != nil {
		t.Fatal(err)
	}
	if !c.Responses().Shutdown {
		t.Fatal("shutdown flag lost")
	}
	if err := c.Add(2, &wire.RequestList{}); err == nil {
		t.Fatal("rank outside the group accepted")
	}
	if err := c.Add(1, &wire.RequestList{Requests: []wire.Request{ar(0, "x")}}); err == nil {
		t.Fatal("request with a foreign rank accepted")
	}
	add(t, c, 0, ar(0, "d"))
	if err := c.Add(0, &wire.RequestList{Requests: []wire.Request{ar(0, "d")}}); err == nil {
		t.Fatal("duplicate submission accepted")
	}
}

func TestEvents(t *testing.T) {
	c := New(2)
	add(t, c, 0, ar(0, "a"))
	add(t, c, 1, ar(1, "a"))
	c.Responses()
	ev := c.Events()
	kinds := []EventKind{Started, RankReady, RankReady, Finished}
	if len(ev) != len(kinds) {
		t.Fatalf("events %+v", ev)
	}
	for i, k := range kinds {
		if ev[i].Kind != k {
			t.Fatalf("event %d kind %v, want %v", i, ev[i].Kind, k)
		}
	}
	if len(c.Events()) != 0 {
		t.Fatal("events not cleared")
	}
}

func TestLastSubmitted(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New(3)
	if got := c.LastSubmitted(); !reflect.DeepEqual(got, make([]time.Time, 3)) {
		t.Fatalf("before any request: %v", got)
	}
	// An empty list is no submission; Add records no time.
	if err := c.AddAt(0, &wire.RequestList{}, t0); err != nil {
		t.Fatal(err)
	}
	add(t, c, 2, ar(2, "x", 1))
	if err := c.AddAt(1, &wire.RequestList{Requests: []wire.Request{ar(1, "a", 1)}}, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	want := []time.Time{{}, t0.Add(time.Second), {}}
	got := c.LastSubmitted()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after AddAt: %v, want %v", got, want)
	}
	got[0] = t0 // a copy
	if c.LastSubmitted()[0] != (time.Time{}) {
		t.Fatal("LastSubmitted returned the coordinator's own slice")
	}
	// A cached cycle that every rank agreed on counts for every rank, but
	// never moves a later submission back.
	c.TouchAll(t0.Add(2 * time.Second))
	c.TouchAll(t0.Add(time.Second))
	if err := c.AddAt(2, &wire.RequestList{Requests: []wire.Request{ar(2, "a", 1)}}, t0.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	want = []time.Time{t0.Add(2 * time.Second), t0.Add(2 * time.Second), t0.Add(3 * time.Second)}
	if got := c.LastSubmitted(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after TouchAll: %v, want %v", got, want)
	}
	// A rejected list records nothing.
	if err := c.AddAt(0, &wire.RequestList{Requests: []wire.Request{ar(1, "b", 1)}}, t0.Add(4*time.Second)); err == nil {
		t.Fatal("request marked with another rank accepted")
	}
	if got := c.LastSubmitted()[0]; !got.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("rejected list recorded: %v", got)
	}
}
