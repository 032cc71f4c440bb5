package jobload

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/fdlimit"
	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/internal/job/secret"
	"github.com/gohorovod/gohorovod/internal/job/tcpstore/tcpstoretest"
)

func TestMain(m *testing.M) {
	ChildMain()
	os.Exit(m.Run())
}

// envClients overrides the number of clients of the load tests.
const envClients = "GOHOROVOD_JOBLOAD_CLIENTS"

// clients is the number of clients of a load test: 10,000, 2,000 with
// -short or under the race detector (see RaceEnabled), or envClients.
func clients(t *testing.T) int {
	if s := os.Getenv(envClients); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 {
			t.Fatalf("%s=%q: want a number of clients, at least 2", envClients, s)
		}
		return n
	}
	switch {
	case testing.Short():
		return 2000
	case RaceEnabled:
		t.Log("the race detector allows 8128 goroutines a process: 2,000 clients; run without -race for 10,000")
		return 2000
	}
	return 10000
}

// clientTimeout is each client's deadline, past which it fails the test.
// Every client's answer carries all n members, which it decodes: O(n^2)
// in all, about 28 ms a client at 10,000 when all of them share this
// machine's CPUs (each has one of its own in a real job); hence a minute
// plus 4 µs times n^2 (7 minutes at 10,000).
func clientTimeout(n int) time.Duration {
	return time.Minute + time.Duration(n)*time.Duration(n)*4*time.Microsecond
}

// maxServerBytesPerClient bounds the heap a rendezvous server may hold
// per worker (besides 64 MiB for the member list and the rest).
const maxServerBytesPerClient = 32 << 10

// serverFiles makes sure this process may hold n connections, or skips
// the test saying why.
func serverFiles(t *testing.T, what string, n int) {
	lim, err := fdlimit.Ensure(what, uint64(n))
	var le *fdlimit.LimitError
	if errors.As(err, &le) {
		t.Skipf("cannot run %d clients here: %v", n, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("RLIMIT_NOFILE: soft %d, hard %d", lim.Soft, lim.Hard)
}

// report logs the figures and fails the test when a client failed.
func report(t *testing.T, name string, n int, res Result, u Usage) {
	t.Logf("%s: %v", name, res)
	t.Logf("%s server: heap in use +%.1f MiB (%.1f KiB per client), sys +%.1f MiB (%.1f KiB per client), goroutines +%d (%.2f per client)",
		name, mib(u.HeapInuse), kib(u.HeapInuse)/float64(n), mib(u.Sys), kib(u.Sys)/float64(n), u.Goroutines, float64(u.Goroutines)/float64(n))
	if res.Failed > 0 || res.Served != n {
		t.Fatalf("%d of %d clients failed (%d served); the first:\n%s", res.Failed, n, res.Served, strings.Join(res.Errors, "\n"))
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
func kib(b uint64) float64 { return float64(b) / (1 << 10) }

// listen listens on a free port of loopback, or skips the test.
func listen(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip("no loopback TCP:", err)
	}
	return ln
}

// N ranks join the rendezvous server at once; every one gets its
// assignment, none is refused or times out.
func TestRendezvousLoad(t *testing.T) {
	n := clients(t)
	serverFiles(t, fmt.Sprintf("a rendezvous server of %d clients", n), n)
	hexKey, err := secret.New()
	if err != nil {
		t.Fatal(err)
	}
	key, _ := secret.Parse(hexKey)
	meter := StartMeter(20 * time.Millisecond)
	srv, err := rendezvous.NewServer(key, Slots(n))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ln := listen(t)
	go srv.Serve(ln)
	joined := make(chan time.Duration, 1)
	t0 := time.Now() // the child's start included
	go func() { <-srv.Done(); meter.Sample(); joined <- time.Since(t0) }()
	timeout := clientTimeout(n)
	res, err := Spawn(context.Background(), Run{Kind: KindRendezvous, Addr: ln.Addr().String(), N: n, Key: key, Timeout: timeout})
	u := meter.Stop()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-joined:
		t.Logf("rendezvous: every client had joined %v after the clients' process started", d.Round(time.Millisecond))
	default:
	}
	report(t, "rendezvous", n, res, u)
	// O(1) a worker, and the member list once: what each worker's own
	// encoded answer cost (O(n) each) was 423 KiB a worker at 2,000.
	if limit := uint64(n)*maxServerBytesPerClient + 64<<20; u.HeapInuse > limit {
		t.Errorf("the server's heap grew by %.1f MiB for %d clients, more than %.1f MiB: does it hold O(n) per worker?", mib(u.HeapInuse), n, mib(limit))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Wait(ctx); err != nil {
		t.Fatalf("the server: %v", err)
	}
}

// N ranks meet through the TCPStore at once, as torch's c10d barrier
// does; none is refused or times out.
func TestStoreLoad(t *testing.T) {
	n := clients(t)
	serverFiles(t, fmt.Sprintf("a TCPStore of %d clients", n), n)
	meter := StartMeter(20 * time.Millisecond)
	st, err := tcpstoretest.Start(true)
	if err != nil {
		t.Skip("no loopback TCP:", err)
	}
	defer st.Close()
	res, err := Spawn(context.Background(), Run{Kind: KindStore, Addr: st.Addr(), N: n, Timeout: clientTimeout(n)})
	u := meter.Stop()
	if err != nil {
		t.Fatal(err)
	}
	report(t, "store", n, res, u)
}
