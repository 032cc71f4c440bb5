package emucluster_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/emucluster"
)

// The test binary doubles as the program run on the nodes: with
// EMUCLUSTER_ROLE set it plays that role and exits.
func TestMain(m *testing.M) {
	if role := os.Getenv("EMUCLUSTER_ROLE"); role != "" {
		if err := play(role, os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// play runs one role:
//
//	tcp-sink ADDR        accept one connection, print the bytes read
//	tcp-send ADDR BYTES  send BYTES, print the seconds it took to the peer's close
//	udp-count ADDR N     count datagrams for a second after the first, print it
//	udp-send ADDR N      send N small datagrams, paced
//	dial ADDR            print "ok" or the dial's error, within 2 s
//	hostname             print the hostname
func play(role string, args []string) error {
	switch role {
	case "tcp-sink":
		ln, err := net.Listen("tcp", args[0])
		if err != nil {
			return err
		}
		fmt.Println("listening")
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		n, err := io.Copy(io.Discard, c)
		c.Close()
		fmt.Println(n)
		return err
	case "tcp-send":
		size, _ := strconv.Atoi(args[1])
		var c net.Conn
		var err error
		for try := 0; try < 100; try++ {
			if c, err = net.Dial("tcp", args[0]); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			return err
		}
		start := time.Now()
		buf := make([]byte, 1<<20)
		for left := size; left > 0; left -= len(buf) {
			if _, err := c.Write(buf[:min(left, len(buf))]); err != nil {
				return err
			}
		}
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c)
		fmt.Printf("%.4f\n", time.Since(start).Seconds())
		return nil
	case "udp-count":
		pc, err := net.ListenPacket("udp", args[0])
		if err != nil {
			return err
		}
		pc.(*net.UDPConn).SetReadBuffer(8 << 20)
		fmt.Println("listening")
		buf := make([]byte, 2048)
		n := 0
		for {
			if n > 0 {
				pc.SetReadDeadline(time.Now().Add(time.Second))
			}
			if _, _, err := pc.ReadFrom(buf); err != nil {
				break
			}
			n++
		}
		fmt.Println(n)
		return nil
	case "udp-send":
		n, _ := strconv.Atoi(args[1])
		c, err := net.Dial("udp", args[0])
		if err != nil {
			return err
		}
		msg := make([]byte, 100)
		for i := 0; i < n; i++ {
			if _, err := c.Write(msg); err != nil {
				return err
			}
			if i%32 == 31 {
				time.Sleep(200 * time.Microsecond)
			}
		}
		return nil
	case "dial":
		c, err := net.DialTimeout("tcp", args[0], 2*time.Second)
		if err != nil {
			fmt.Println(err)
			return nil
		}
		c.Close()
		fmt.Println("ok")
		return nil
	case "hostname":
		h, err := os.Hostname()
		fmt.Println(h)
		return err
	}
	return fmt.Errorf("unknown role %q", role)
}

func newCluster(t *testing.T, o emucluster.Options) *emucluster.Cluster {
	t.Helper()
	c, err := emucluster.New(o)
	if errors.Is(err, emucluster.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// output runs role on node i and returns what it printed.
func output(t *testing.T, c *emucluster.Cluster, i int, role string, args ...string) string {
	t.Helper()
	cmd := c.Command(i, append([]string{os.Args[0]}, args...)...)
	cmd.Env = append(os.Environ(), "EMUCLUSTER_ROLE="+role)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s on node %d: %v: %s", role, i, err, out)
	}
	return strings.TrimSpace(string(out))
}

// background starts role on node i and returns a channel that yields what
// it printed, once it has printed "listening".
func background(t *testing.T, c *emucluster.Cluster, i int, role string, args ...string) <-chan string {
	t.Helper()
	cmd := c.Command(i, append([]string{os.Args[0]}, args...)...)
	cmd.Env = append(os.Environ(), "EMUCLUSTER_ROLE="+role)
	cmd.Stderr = os.Stderr
	pr, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	first := make([]byte, len("listening\n"))
	if _, err := io.ReadFull(pr, first); err != nil {
		t.Fatalf("%s on node %d: %v", role, i, err)
	}
	res := make(chan string, 1)
	go func() {
		rest, _ := io.ReadAll(pr)
		cmd.Wait()
		res <- strings.TrimSpace(string(rest))
	}()
	return res
}

func TestNodesHaveTheirOwnNamesAndReachEachOther(t *testing.T) {
	c := newCluster(t, emucluster.Options{Nodes: 3})
	nodes := c.Nodes()
	for i, n := range nodes {
		if got := output(t, c, i, "hostname"); got != n.Host {
			t.Errorf("node %d says its hostname is %q, want %q", i, got, n.Host)
		}
	}
	// Node 2 reaches node 0 by name (its /etc/hosts).
	sink := background(t, c, 0, "tcp-sink", nodes[0].Addr+":7001")
	output(t, c, 2, "tcp-send", nodes[0].Host+":7001", "100000")
	if got := <-sink; got != "100000" {
		t.Errorf("node 0 read %q bytes from node 2, want 100000", got)
	}
}

// TestRateCapsTheLink: a 100 Mbit/s link cannot carry 4 MB in less than
// the time the rate allows (a lower bound, which no noise can beat).
func TestRateCapsTheLink(t *testing.T) {
	const rate, size = 100_000_000, 4_000_000
	c := newCluster(t, emucluster.Options{Nodes: 2, Rate: rate})
	sink := background(t, c, 1, "tcp-sink", c.Addrs()[1]+":7002")
	secs, _ := strconv.ParseFloat(output(t, c, 0, "tcp-send", c.Addrs()[1]+":7002", strconv.Itoa(size)), 64)
	if got := <-sink; got != strconv.Itoa(size) {
		t.Fatalf("read %s bytes, want %d", got, size)
	}
	floor := 0.9 * size * 8 / rate
	if secs < floor {
		t.Errorf("4 MB crossed a 100 Mbit/s link in %.3f s, under the %.3f s its rate allows", secs, floor)
	}
	t.Logf("4 MB at 100 Mbit/s: %.3f s (%.0f Mbit/s)", secs, size*8/secs/1e6)
	// SetRate changes it: ten times faster now, so under the old floor.
	if err := c.SetRate(0, 10*rate); err != nil {
		t.Fatal(err)
	}
	if err := c.SetRate(1, 10*rate); err != nil {
		t.Fatal(err)
	}
	sink = background(t, c, 1, "tcp-sink", c.Addrs()[1]+":7003")
	secs2, _ := strconv.ParseFloat(output(t, c, 0, "tcp-send", c.Addrs()[1]+":7003", strconv.Itoa(size)), 64)
	<-sink
	if secs2 < 0.9*size*8/(10*rate) {
		t.Errorf("4 MB at 1 Gbit/s in %.4f s: faster than the rate", secs2)
	}
	if secs2 >= floor {
		t.Errorf("after SetRate to 1 Gbit/s, 4 MB still took %.3f s (at 100 Mbit/s: %.3f s)", secs2, secs)
	}
}

// TestSilenceDropsEverythingAndMendRestores: a silenced node's peers get
// no answer at all (a timeout, not a refusal); mended, it answers.
func TestSilenceDropsEverythingAndMendRestores(t *testing.T) {
	c := newCluster(t, emucluster.Options{Nodes: 2, Rate: 1e9})
	addr := c.Addrs()[1] + ":7004" // nothing listens: a live node refuses
	if got := output(t, c, 0, "dial", addr); !strings.Contains(got, "refused") {
		t.Fatalf("dial to a live node's closed port: %q, want a refusal", got)
	}
	if err := c.Silence(1); err != nil {
		t.Fatal(err)
	}
	if got := output(t, c, 0, "dial", addr); !strings.Contains(got, "timeout") {
		t.Errorf("dial to a silenced node: %q, want a timeout (no reset, no answer)", got)
	}
	if err := c.Mend(1); err != nil {
		t.Fatal(err)
	}
	if got := output(t, c, 0, "dial", addr); !strings.Contains(got, "refused") {
		t.Errorf("dial to a mended node: %q, want a refusal again", got)
	}
}

// TestLossDropsItsShare: at a loss of 1/64 each way, node 1 receives 63
// of every 64 datagrams node 0 sends (the drops are chosen by the
// packets' ids, which a connected socket numbers one by one).
func TestLossDropsItsShare(t *testing.T) {
	const n = 6400
	c := newCluster(t, emucluster.Options{Nodes: 2})
	if err := c.SetLoss(0, 1.0/64); err != nil {
		t.Fatal(err)
	}
	count := background(t, c, 1, "udp-count", c.Addrs()[1]+":7005", strconv.Itoa(n))
	output(t, c, 0, "udp-send", c.Addrs()[1]+":7005", strconv.Itoa(n))
	got, _ := strconv.Atoi(<-count)
	// Both ends of node 0's link drop; node 1's does not: 1/64 lost.
	if want := n - n/64; got > want || got < want-n/200 {
		t.Errorf("received %d of %d datagrams, want about %d", got, n, want)
	}
	if err := c.SetLoss(0, 0); err != nil {
		t.Fatal(err)
	}
	count = background(t, c, 1, "udp-count", c.Addrs()[1]+":7006", strconv.Itoa(n))
	output(t, c, 0, "udp-send", c.Addrs()[1]+":7006", strconv.Itoa(n))
	if got, _ := strconv.Atoi(<-count); got < n-n/200 {
		t.Errorf("loss off: received %d of %d", got, n)
	}
}

func TestCloseKillsWhatRunsAndRemovesTheNamespaces(t *testing.T) {
	c := newCluster(t, emucluster.Options{Nodes: 2, Name: fmt.Sprintf("cl%d", os.Getpid()%100000)})
	cmd := c.Command(1, "sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	time.Sleep(200 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a process on a node outlived Close")
	}
	for _, n := range c.Nodes() {
		if _, err := os.Stat("/run/netns/" + n.NS); err == nil {
			t.Errorf("namespace %s still there", n.NS)
		}
		if _, err := os.Stat("/etc/netns/" + n.NS); err == nil {
			t.Errorf("/etc/netns/%s still there", n.NS)
		}
	}
}
