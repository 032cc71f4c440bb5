package tcpstore

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/tcpstore/tcpstoretest"
)

// torchPython is the Python that has torch: Debian's python3-torch
// installs for /usr/bin/python3, which a PATH may put behind another.
func torchPython(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(py, "-c", "import torch.distributed").Run() == nil {
			return py
		}
	}
	t.Skip("no Python with torch here (apt-get install python3-torch; scripts/deps.sh does): the real TCPStore server is not available")
	return ""
}

// serverScript serves a TCPStore, sets py/hello from Python, prints the
// port, then checks what the Go client set and prints it, until its
// standard input closes.
const serverScript = `
import sys, datetime
import torch.distributed as dist
s = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=30), False)
s.set("py/hello", "from python")
print(s.port, flush=True)
for line in sys.stdin:
    key = line.strip()
    print(s.get(key).decode(), flush=True)
`

// torchStore starts torch's own TCPStore server and returns its address,
// a function that reads a key through torch's Python client, and a
// cleanup.
func torchStore(t *testing.T) (string, func(key string) string) {
	py := torchPython(t)
	cmd := exec.Command(py, "-c", serverScript)
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	outPipe, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	out := bufio.NewScanner(outPipe)
	if !out.Scan() {
		t.Fatal("torch's TCPStore server printed no port")
	}
	addr := net.JoinHostPort("127.0.0.1", strings.TrimSpace(out.Text()))
	get := func(key string) string {
		if _, err := in.Write([]byte(key + "\n")); err != nil {
			t.Fatal(err)
		}
		if !out.Scan() {
			t.Fatalf("torch's client could not read %q", key)
		}
		return out.Text()
	}
	return addr, get
}

func TestAgainstTorch(t *testing.T) {
	addr, pyGet := torchStore(t)
	exercise(t, addr, torch1.name, pyGet)
}

// exercise runs every query against the server at addr, which must hold
// py/hello = "from python" and speak the protocol named want; readBack
// reads a key through the server's own side.
func exercise(t *testing.T, addr, want string, readBack func(key string) string) {
	t.Helper()
	pyGet := readBack
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Protocol() != want {
		t.Errorf("the probe found %q, want %q", c.Protocol(), want)
	}

	v, err := c.Get(ctx, "py/hello")
	if err != nil || string(v) != "from python" {
		t.Fatalf("Get of a key Python set: %q, %v", v, err)
	}
	if err := c.Set("go/hello", []byte("from go")); err != nil {
		t.Fatal(err)
	}
	if got := pyGet("go/hello"); got != "from go" {
		t.Errorf("Python read %q for the key Go set", got)
	}
	if n, err := c.Add("go/count", 5); err != nil || n != 5 {
		t.Errorf("Add: %d, %v", n, err)
	}
	if n, err := c.Add("go/count", -2); err != nil || n != 3 {
		t.Errorf("Add again: %d, %v", n, err)
	}
	if got := pyGet("go/count"); got != "3" {
		t.Errorf("Python read the counter as %q", got)
	}
	if ok, err := c.Check("go/hello", "py/hello"); err != nil || !ok {
		t.Errorf("Check of set keys: %v, %v", ok, err)
	}
	if ok, err := c.Check("go/hello", "nobody"); err != nil || ok {
		t.Errorf("Check with a missing key: %v, %v", ok, err)
	}
	if got, err := c.CompareSet("go/hello", []byte("from go"), []byte("swapped")); err != nil || string(got) != "swapped" {
		t.Errorf("CompareSet that matches: %q, %v", got, err)
	}
	if got, err := c.CompareSet("go/hello", []byte("stale"), []byte("lost")); err != nil || string(got) != "swapped" {
		t.Errorf("CompareSet that does not match: %q, %v", got, err)
	}
	n, err := c.NumKeys()
	if err != nil || n < 3 {
		t.Errorf("NumKeys: %d, %v", n, err)
	}
	if ok, err := c.Delete("go/hello"); err != nil || !ok {
		t.Errorf("Delete: %v, %v", ok, err)
	}
	if ok, err := c.Delete("go/hello"); err != nil || ok {
		t.Errorf("Delete of a deleted key: %v, %v", ok, err)
	}

	// A Wait that another client satisfies returns; one that nobody
	// satisfies ends at its deadline with ErrTimeout.
	c2, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	done := make(chan error, 1)
	go func() { done <- c2.Wait(ctx, "late/a", "late/b") }()
	time.Sleep(100 * time.Millisecond)
	c.Set("late/a", nil)
	c.Set("late/b", []byte("x"))
	if err := <-done; err != nil {
		t.Errorf("Wait for keys set later: %v", err)
	}
	short, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer scancel()
	start := time.Now()
	if err := c2.Wait(short, "never"); !errors.Is(err, ErrTimeout) {
		t.Errorf("Wait for a key nobody sets: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the timed-out Wait took %v", d)
	}
}

func TestDialRetriesUntilDeadline(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, addr); err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("Dial with nobody listening: %v", err)
	}
}

// fakeServer answers every request on a pipe with answer, and returns the
// client's end.
func fakeServer(answer []byte) *Client {
	a, b := net.Pipe()
	go func() {
		buf := make([]byte, 4096)
		b.Read(buf) // the request
		b.Write(answer)
		b.Close()
	}()
	return &Client{conn: a, r: bufio.NewReader(a), addr: "fake"}
}

func TestBadAnswers(t *testing.T) {
	// A value larger than the limit is refused before it is allocated.
	huge := []byte{0, 0, 0, 0, 0, 0, 0, 0x10}
	if _, err := fakeServer(huge).CompareSet("k", nil, nil); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("huge value: %v", err)
	}
	if _, err := fakeServer([]byte{7}).Check("k"); err == nil || !strings.Contains(err.Error(), "CHECK") {
		t.Errorf("unknown CHECK answer: %v", err)
	}
	if _, err := fakeServer([]byte{1, 2}).NumKeys(); err == nil {
		t.Error("a short number was accepted")
	}
}

func FuzzAnswers(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{5, 0, 0, 0, 0, 0, 0, 0, 'h', 'e', 'l', 'l', 'o'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, answer []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		// Every query must end with a value or an error, never a panic or
		// an allocation beyond the limit.
		fakeServer(answer).Get(ctx, "k")
		fakeServer(answer).CompareSet("k", nil, nil)
		fakeServer(answer).Check("k")
		fakeServer(answer).Add("k", 1)
		fakeServer(answer).Delete("k")
		fakeServer(answer).NumKeys()
	})
}

// startTorch2 serves a store of torch 2's protocol for the test.
func startTorch2(t *testing.T, ping bool) *tcpstoretest.Torch2 {
	s, err := tcpstoretest.Start(ping)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// A torch 2 server that answers PING (torch 2.4 and later) and one that
// does not (a validating server before PING) are both found by the probe
// and served in their numbering; no connection of the client ever opens
// with anything but VALIDATE.
func TestAgainstFakeTorch2(t *testing.T) {
	for _, ping := range []bool{true, false} {
		want := torch2.name
		if ping {
			want = torch2Ping.name
		}
		t.Run(want, func(t *testing.T) {
			s := startTorch2(t, ping)
			exercise(t, s.Addr(), want, s.Value)
			if validated, refused := s.Counts(); refused != 0 || validated < 3 {
				t.Errorf("the server refused %d connections and validated %d", refused, validated)
			}
		})
	}
}

func TestPingEchoMismatch(t *testing.T) {
	s := startTorch2(t, true)
	s.BadEcho = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := Dial(ctx, s.Addr()); err == nil || !strings.Contains(err.Error(), "PING with nonce") {
		t.Errorf("a wrong echo of the nonce: %v", err)
		if c != nil {
			c.Close()
		}
	}
}

// A server that accepts and never answers is not a store: Dial ends at
// the context's deadline with an error that says so.
func TestProbeOfSilentServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer func() { l.Close(); <-done }()
	go func() {
		defer close(done)
		var held []net.Conn
		for {
			c, err := l.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := Dial(ctx, l.Addr().String()); err == nil || !strings.Contains(err.Error(), "no answer to the handshake") {
		t.Errorf("Dial of a silent server: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Dial of a silent server took %v", d)
	}
}
