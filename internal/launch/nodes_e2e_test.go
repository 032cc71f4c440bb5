//go:build linux

package launch_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/secret"
)

// nodeRun is a process the tests started (one node's launcher of a
// multi-node job, or a worker): its command and what it printed.
type nodeRun struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	err            error
	took           time.Duration
}

// placementVars would place a node's launcher in another job: the tests'
// own processes start without them.
var placementVars = []string{"GOHOROVOD_SECRET", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE",
	"PET_MASTER_ADDR", "PET_MASTER_PORT", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID", "SLURM_JOB_NODELIST",
	"OMPI_MCA_orte_default_hostfile"}

// startNode starts argv (in network namespace ns where not "") with env
// added to this process's environment.
func startNode(t *testing.T, ns string, env []string, argv ...string) *nodeRun {
	t.Helper()
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(withoutEnv(os.Environ(), placementVars...), env...)
	return startRun(t, cmd)
}

// startRun starts cmd, collecting its output; the test's end kills it if
// it still runs.
func startRun(t *testing.T, cmd *exec.Cmd) *nodeRun {
	t.Helper()
	r := &nodeRun{cmd: cmd, done: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	start := time.Now()
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		r.took = time.Since(start)
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// wait waits up to d for the launcher to end.
func (r *nodeRun) wait(t *testing.T, what string, d time.Duration) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(d):
		r.cmd.Process.Kill()
		<-r.done
		t.Fatalf("%s did not end within %v\nstdout:\n%s\nstderr:\n%s", what, d, r.stdout.String(), r.stderr.String())
	}
}

// waitFor waits up to d for pattern in the launcher's standard output.
func (r *nodeRun) waitFor(t *testing.T, what, pattern string, d time.Duration) {
	t.Helper()
	r.waitUntil(t, what, fmt.Sprintf("%q", pattern), d, func(out string) bool { return strings.Contains(out, pattern) })
}

// waitUntil waits up to d for found to hold of the launcher's standard
// output so far; want says what is awaited in the failure message.
func (r *nodeRun) waitUntil(t *testing.T, what, want string, d time.Duration, found func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !found(r.stdout.String()) {
		select {
		case <-r.done:
			t.Fatalf("%s ended before printing %s: %v\nstdout:\n%s\nstderr:\n%s", what, want, r.err, r.stdout.String(), r.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not print %s within %v\nstdout:\n%s\nstderr:\n%s", what, want, d, r.stdout.String(), r.stderr.String())
		}
	}
}

func newHexSecret(t *testing.T) string {
	s, err := secret.New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestE2ENodesOnOneMachine: two launchers of one job, node 0 and node 1,
// both on this machine (no root needed), placed as a PyTorchJob places
// its pods: they meet at node 0's port, the
// workers get horovodrun's ranks (node 0 ranks 0 and 1, node 1 ranks 2
// and 3) and their allreduce sums every rank's value.
func TestE2ENodesOnOneMachine(t *testing.T) {
	launcher, worker := build(t)
	secret := "GOHOROVOD_SECRET=" + newHexSecret(t)
	port := freePort(t)
	// Each launcher gets what a PyTorchJob's pod gets (MASTER_ADDR,
	// MASTER_PORT, WORLD_SIZE and RANK, its node rank), with the node's
	// place in the flags as the example manifest gives it: the launcher
	// reads MASTER_ADDR and MASTER_PORT, and its workers take their place
	// from it, not from the torch variables they inherit.
	pod := func(rank int) []string {
		return []string{secret, "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "WORLD_SIZE=2", "RANK=" + strconv.Itoa(rank)}
	}
	// Node 1 first: it waits for node 0, and says so.
	n1 := startNode(t, "", pod(1), launcher, "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2", worker, "hvd-allreduce")
	time.Sleep(700 * time.Millisecond)
	n0 := startNode(t, "", pod(0), launcher, "--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "2", worker, "hvd-allreduce")
	n0.wait(t, "node 0", 60*time.Second)
	n1.wait(t, "node 1", 30*time.Second)
	for i, r := range []*nodeRun{n0, n1} {
		if r.err != nil {
			t.Fatalf("node %d: %v\nstdout:\n%s\nstderr:\n%s", i, r.err, r.stdout.String(), r.stderr.String())
		}
	}
	if !strings.Contains(n1.stderr.String(), "waiting for node 0's launcher at 127.0.0.1:"+port) {
		t.Errorf("node 1 did not name the master it waits for:\n%s", n1.stderr.String())
	}
	lines := append(strings.Split(strings.TrimSpace(n0.stdout.String()), "\n"), strings.Split(strings.TrimSpace(n1.stdout.String()), "\n")...)
	wantTwoByTwo(t, lines, func(r int) string { return fmt.Sprintf("[1,%d]<stdout>:", r) })
	// Node 0's ranks ran on node 0's launcher, node 1's on node 1's.
	if !strings.Contains(n0.stdout.String(), "[1,0]") || !strings.Contains(n1.stdout.String(), "[1,2]") {
		t.Errorf("ranks on the wrong node:\nnode 0:\n%s\nnode 1:\n%s", n0.stdout.String(), n1.stdout.String())
	}
}

// TestE2ENodesWrongSecret: a node whose GOHOROVOD_SECRET differs from
// node 0's is refused by the handshake, and its launcher ends at once with
// a message that says so; node 0 keeps waiting (it ends here at its
// --start-timeout, naming the node that never arrived).
func TestE2ENodesWrongSecret(t *testing.T) {
	launcher, worker := build(t)
	t.Parallel()
	port := freePort(t)
	n0 := startNode(t, "", []string{"GOHOROVOD_SECRET=" + newHexSecret(t)}, launcher, "--nnodes", "2", "--nproc-per-node", "1",
		"--master-addr", "127.0.0.1", "--master-port", port, "--start-timeout", "4", worker, "hvd-allreduce")
	time.Sleep(300 * time.Millisecond)
	n1 := startNode(t, "", []string{"GOHOROVOD_SECRET=" + newHexSecret(t)}, launcher, "--nnodes", "2", "--node-rank", "1",
		"--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port, worker, "hvd-allreduce")
	n1.wait(t, "node 1", 15*time.Second)
	if n1.err == nil || !strings.Contains(n1.stderr.String(), "refused this node") || !strings.Contains(n1.stderr.String(), "GOHOROVOD_SECRET") {
		t.Fatalf("node 1 with the wrong secret: %v\n%s", n1.err, n1.stderr.String())
	}
	n0.wait(t, "node 0", 15*time.Second)
	if n0.err == nil || !strings.Contains(n0.stderr.String(), "node(s) [1] did not arrive") {
		t.Fatalf("node 0: %v\n%s", n0.err, n0.stderr.String())
	}
}

// TestE2ENodesRefuseWithoutSecret: two nodes and no GOHOROVOD_SECRET (and
// no --insecure-secret): the launcher refuses to start, saying how to
// give one, with the usage status.
func TestE2ENodesRefuseWithoutSecret(t *testing.T) {
	launcher, worker := build(t)
	r := startNode(t, "", nil, launcher, "--nnodes", "2", "--master-addr", "127.0.0.1", worker, "hvd-allreduce")
	r.wait(t, "the launcher", 10*time.Second)
	var ee *exec.ExitError
	if r.err == nil || !errorsAs(r.err, &ee) || ee.ExitCode() != 2 || !strings.Contains(r.stderr.String(), "set GOHOROVOD_SECRET") {
		t.Fatalf("want status 2 and the secret's hint, got %v:\n%s", r.err, r.stderr.String())
	}
}

func errorsAs(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*ee = e
	}
	return ok
}

// buildMNIST builds the MNIST example (CGO_ENABLED=0, the embedded
// transport) into dir.
func buildMNIST(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "mnist"), "../../examples/mnist")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build mnist: %v\n%s", err, out)
	}
	return filepath.Join(dir, "mnist")
}

// TestE2ENodesNetnsMNIST: two "nodes", network namespaces with their own
// addresses, each with its own `gohorovodrun --nnodes 2 --node-rank K
// --nproc-per-node 2 --master-addr 10.77.0.1`, train the MNIST example
// to at least 97% test accuracy; the workers of the two nodes reach each
// other over the namespaces' link only.
func TestE2ENodesNetnsMNIST(t *testing.T) {
	t.Parallel()
	launcher, _ := build(t)
	names, addrs := netnsHosts(t, 2)
	mnist := buildMNIST(t, t.TempDir())
	env := []string{"GOHOROVOD_SECRET=" + newHexSecret(t)}
	var nodes []*nodeRun
	start := time.Now()
	for k := range names {
		nodes = append(nodes, startNode(t, names[k], env, launcher, "--nnodes", "2", "--node-rank", strconv.Itoa(k),
			"--nproc-per-node", "2", "--master-addr", addrs[0], "--master-port", "29400", mnist, "--epochs", "3"))
	}
	for k, r := range nodes {
		r.wait(t, fmt.Sprintf("node %d", k), 8*time.Minute)
		if r.err != nil {
			t.Fatalf("node %d: %v\nstdout:\n%s\nstderr:\n%s", k, r.err, r.stdout.String(), r.stderr.String())
		}
	}
	t.Logf("2 nodes x 2 workers, 3 epochs in %v", time.Since(start).Round(time.Millisecond))
	out := nodes[0].stdout.String()
	if !strings.Contains(out, "mnist: 4 ranks") {
		t.Fatalf("not 4 ranks:\n%s", out)
	}
	m := regexp.MustCompile(`epoch 3: .*test accuracy ([0-9.]+)%`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no third epoch in node 0's output:\n%s", out)
	}
	acc, _ := strconv.ParseFloat(m[1], 64)
	if acc < 97 {
		t.Fatalf("test accuracy %.2f%%, want at least 97%%:\n%s", acc, out)
	}
	t.Logf("test accuracy %.2f%%", acc)
	if !strings.Contains(nodes[1].stderr.String(), "node 1 of 2: joined node 0 at "+addrs[0]+":29400") {
		t.Errorf("node 1 did not join node 0 over the namespaces' link:\n%s", nodes[1].stderr.String())
	}
}

// TestE2ENodesNetnsNodeDies: two namespace nodes train; one node's
// launcher is killed (SIGKILL, as a lost machine or pod would be). The
// launcher of the other node ends the job there, with a non-zero status
// and a message naming the node that failed (its rank and host), within a
// bound; nothing is left running.
func TestE2ENodesNetnsNodeDies(t *testing.T) {
	t.Parallel()
	launcher, worker := build(t)
	names, addrs := netnsHosts(t, 2)
	for _, tc := range []struct {
		name        string
		kill, other int
	}{{"node 1 killed", 1, 0}, {"node 0 killed", 0, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{"GOHOROVOD_SECRET=" + newHexSecret(t)}
			pids := t.TempDir()
			port := strconv.Itoa(29401 + tc.kill)
			var nodes []*nodeRun
			for k := range names {
				nodes = append(nodes, startNode(t, names[k], env, launcher, "--nnodes", "2", "--node-rank", strconv.Itoa(k),
					"--nproc-per-node", "2", "--master-addr", addrs[0], "--master-port", port, worker, "train", pids))
			}
			nodes[0].waitFor(t, "node 0", "training 0 ", 60*time.Second)
			nodes[1].waitFor(t, "node 1", "training 2 ", 60*time.Second)
			victim := nodes[tc.kill]
			// ip netns exec runs the launcher itself (it execs).
			if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			r := nodes[tc.other]
			r.wait(t, fmt.Sprintf("node %d after node %d was killed", tc.other, tc.kill), 30*time.Second)
			took := time.Since(killed)
			if r.err == nil {
				t.Fatalf("node %d ended well after node %d was killed:\n%s", tc.other, tc.kill, r.stderr.String())
			}
			want := fmt.Sprintf("node %d (host ", tc.kill)
			if !strings.Contains(r.stderr.String(), want) || !strings.Contains(r.stderr.String(), "the job was stopped on every node") {
				t.Fatalf("node %d's message does not name node %d (%q):\n%s", tc.other, tc.kill, want, r.stderr.String())
			}
			if took > 15*time.Second {
				t.Errorf("node %d took %v to end the job", tc.other, took)
			}
			t.Logf("node %d ended %v after node %d was killed: %s", tc.other, took.Round(time.Millisecond), tc.kill, lastLine(r.stderr.String()))
			// The workers of both nodes are gone (the killed node's by its
			// launcher's guard).
			waitWorkersGone(t, pids, 15*time.Second)
		})
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// waitWorkersGone waits until no process whose pid the train workers
// wrote under dir is alive.
func waitWorkersGone(t *testing.T, dir string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		entries, _ := os.ReadDir(dir)
		living := 0
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				continue
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err == nil && alive(pid) {
				living++
			}
		}
		if living == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d workers still alive %v after the job ended", living, d)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestE2ENodesElastic: an elastic multi-node job, --nnodes 1:2 with two
// workers per node, both launchers on this machine, then on two network
// namespace nodes (as root). Node 0 starts alone
// and trains; node 1's launcher arrives during epoch 1 and the job grows
// to its 4 workers; node 1's launcher is killed (SIGKILL) during epoch 2
// and the job goes on with node 0's 2 workers to the end, every sample of
// every epoch trained once.
func TestE2ENodesElastic(t *testing.T) {
	t.Parallel()
	t.Run("one machine", func(t *testing.T) { testNodesElastic(t, []string{"", ""}, "127.0.0.1") })
	t.Run("namespaces", func(t *testing.T) {
		names, addrs := netnsHosts(t, 2)
		testNodesElastic(t, names, addrs[0])
	})
}

func testNodesElastic(t *testing.T, ns []string, master string) {
	launcher, worker := build(t)
	env := []string{"GOHOROVOD_SECRET=" + newHexSecret(t)}
	port := freePort(t)
	const n, epochs = 120, 6
	args := func(rank int) []string {
		return []string{launcher, "--nnodes", "1:2", "--node-rank", strconv.Itoa(rank), "--nproc-per-node", "2",
			"--master-addr", master, "--master-port", port,
			worker, "elastic", "-n", strconv.Itoa(n), "-epochs", strconv.Itoa(epochs), "-batch", "3", "-sleep", "60ms"}
	}
	n0 := startNode(t, ns[0], env, args(0)...)
	n0.waitFor(t, "node 0", "round=1 epoch=1 ", 60*time.Second)
	n1 := startNode(t, ns[1], env, args(1)...)
	n0.waitFor(t, "node 0", "round=2 epoch=2 ", 60*time.Second)
	if err := n1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	n0.wait(t, "node 0", 2*time.Minute)
	n1.wait(t, "node 1", 10*time.Second)
	if n0.err != nil {
		t.Fatalf("node 0: %v\nstdout:\n%s\nstderr:\n%s\nnode 1's stderr:\n%s", n0.err, n0.stdout.String(), n0.stderr.String(), n1.stderr.String())
	}
	if got := rounds(t, n0.stderr.String()); len(got) < 3 || got[0] != 2 || got[1] != 4 || got[len(got)-1] != 2 {
		t.Fatalf("rounds of sizes %v, want 2, 4, then 2 at the end\n%s", got, n0.stderr.String())
	}
	for _, want := range []string{"node 1 (host ", ") joined", ") is gone"} {
		if !strings.Contains(n0.stderr.String(), want) {
			t.Errorf("node 0 did not log %q:\n%s", want, n0.stderr.String())
		}
	}
	// Node 1's workers trained in round 2 (their output is on node 1).
	if !regexp.MustCompile(`(?m)^\[[^\]]*-node1\[\d\]\]<stdout>:stepped round=2 `).MatchString(n1.stdout.String()) {
		t.Errorf("node 1's workers did not train in round 2:\n%s", n1.stdout.String())
	}
	recs := parseRecords(t, n0.stdout.String()+n1.stdout.String())
	sizes := checkCoverage(t, recs, n, epochs)
	t.Logf("group size per kept step, by epoch: %v", sizes)
}

// TestE2ENodesWorkerFails: a worker of node 1 (rank 2) exits with status
// 3 while the others run: both launchers end the job, each saying that
// node 1 failed and how (rank 2's status), with non-zero statuses.
func TestE2ENodesWorkerFails(t *testing.T) {
	launcher, worker := build(t)
	env := []string{"GOHOROVOD_SECRET=" + newHexSecret(t)}
	port := freePort(t)
	pids := t.TempDir()
	var nodes []*nodeRun
	for k := 0; k < 2; k++ {
		nodes = append(nodes, startNode(t, "", env, launcher, "--nnodes", "2", "--node-rank", strconv.Itoa(k), "--nproc-per-node", "2",
			"--master-addr", "127.0.0.1", "--master-port", port, worker, "fail", "2", "3", pids))
	}
	for k, r := range nodes {
		r.wait(t, fmt.Sprintf("node %d", k), 60*time.Second)
		if r.err == nil {
			t.Fatalf("node %d ended well:\n%s", k, r.stderr.String())
		}
		msg := lastLine(r.stderr.String())
		if !strings.Contains(msg, "node 1 (host ") || !strings.Contains(msg, "rank 2") || !strings.Contains(msg, "status 3") ||
			!strings.Contains(msg, "the job was stopped on every node") {
			t.Errorf("node %d's last words: %q\n%s", k, msg, r.stderr.String())
		}
	}
	waitWorkersGone(t, pids, 15*time.Second)
}
