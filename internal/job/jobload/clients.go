package jobload

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/internal/job/tcpstore"
)

// SlotsPerHost is how many ranks each simulated host has.
const SlotsPerHost = 8

// maxErrors bounds the errors a Result keeps word for word.
const maxErrors = 10

// Result is what a run of clients measured.
type Result struct {
	Clients int      // started
	Served  int      // served correctly
	Failed  int      // refused, failed or timed out
	Errors  []string // the first few failures
	// Total runs from the moment every client was let go until the last
	// one was served (or gave up).
	Total time.Duration
	// P50, P99 and Max are the clients' own times, each from the same
	// start until it was served.
	P50, P99, Max time.Duration
}

// PerClient is Total divided by the clients.
func (r Result) PerClient() time.Duration {
	if r.Clients == 0 {
		return 0
	}
	return r.Total / time.Duration(r.Clients)
}

// String summarises r on one line.
func (r Result) String() string {
	return fmt.Sprintf("%d clients: %d served, %d failed; all served in %v (%v per client); latency p50 %v, p99 %v, max %v",
		r.Clients, r.Served, r.Failed, r.Total.Round(time.Millisecond), r.PerClient().Round(time.Microsecond),
		r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.Max.Round(time.Millisecond))
}

// run starts n clients, lets them go at once, and waits for all of them.
// client(ctx, i) is client i's whole task.
func run(ctx context.Context, n int, client func(ctx context.Context, i int) error) Result {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		lat   = make([]time.Duration, 0, n)
		res   = Result{Clients: n}
		start = make(chan struct{})
		t0    time.Time
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := client(ctx, i)
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, d)
			if err == nil {
				res.Served++
				return
			}
			res.Failed++
			if len(res.Errors) < maxErrors {
				res.Errors = append(res.Errors, fmt.Sprintf("client %d after %v: %v", i, d.Round(time.Millisecond), err))
			}
		}()
	}
	t0 = time.Now()
	close(start)
	wg.Wait()
	res.Total = time.Since(t0)
	slices.Sort(lat)
	if len(lat) > 0 {
		res.P50, res.P99, res.Max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	}
	return res
}

// Slots is the plan of a job of n ranks on hosts of SlotsPerHost:
// node00000 local ranks 0-7, node00001, ...
func Slots(n int) []rendezvous.Slot {
	out := make([]rendezvous.Slot, n)
	for i := range out {
		out[i] = rendezvous.Slot{Host: fmt.Sprintf("node%05d", i/SlotsPerHost), LocalRank: i % SlotsPerHost}
	}
	return out
}

// Payload is what rank i publishes: addresses of the size a worker's
// transport publishes.
func Payload(i int) string {
	return `{"tcp":"127.0.0.1:` + strconv.Itoa(20000+i%40000) + `","unix":"/tmp/gohorovod-1000/job/` + strconv.Itoa(i) + `.sock"}`
}

// RunRendezvous has n clients join the rendezvous server at addr with
// the job's key, as the ranks of Slots(n) with Payload, and checks what
// each is assigned: its rank, the size, and its ring neighbour's payload.
func RunRendezvous(ctx context.Context, addr string, key []byte, n int) Result {
	slots := Slots(n)
	return run(ctx, n, func(ctx context.Context, i int) error {
		a, err := rendezvous.JoinVia(ctx, dialer, addr, key, rendezvous.Member{Slot: slots[i], Data: Payload(i)})
		if err != nil {
			return err
		}
		next := (i + 1) % n
		if a.Rank != i || a.Size != n || a.Members[next].Data != Payload(next) {
			return fmt.Errorf("wrong assignment: rank %d of %d, neighbour's payload %q", a.Rank, a.Size, a.Members[next].Data)
		}
		return nil
	})
}

// Store keys, under a prefix of the run's own.
func rankKey(prefix string, i int) string { return prefix + "/rank/" + strconv.Itoa(i) }

// RunStore has n clients meet through the TCPStore at addr as torch's
// c10d barrier does, under keys that start with prefix (see the package
// documentation).
func RunStore(ctx context.Context, addr, prefix string, n int) Result {
	arrived, all := prefix+"/num_members", prefix+"/last_member"
	return run(ctx, n, func(ctx context.Context, i int) error {
		c, err := tcpstore.Dial(ctx, addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if err := c.Set(rankKey(prefix, i), []byte(Payload(i))); err != nil {
			return err
		}
		k, err := c.Add(arrived, 1)
		if err != nil {
			return err
		}
		if k == int64(n) {
			if err := c.Set(all, []byte("<val_ignored>")); err != nil {
				return err
			}
		}
		if _, err := c.Get(ctx, all); err != nil {
			return err
		}
		next := (i + 1) % n
		v, err := c.Get(ctx, rankKey(prefix, next))
		if err != nil {
			return err
		}
		if string(v) != Payload(next) {
			return fmt.Errorf("rank %d's key holds %q", next, v)
		}
		return nil
	})
}
