//go:build linux

package launch_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/emucluster"
	"github.com/gohorovod/gohorovod/internal/launch"
)

// The faults a network has, on an emulated cluster (internal/emucluster:
// each node a network namespace with its own address and hostname, joined
// by a bridge, every link shaped to 1 Gbit/s): a node whose link goes
// silent (every packet dropped, no reset), a link that flaps for less than
// the heartbeat timeout, and packet loss. Each runs on the embedded
// transport (one gohorovodrun --nnodes per node) and under mpirun
// (gohorovodrun -H over the cluster's ssh stand-in).

// faultTimeout is the heartbeat timeout of these jobs, short to keep the
// tests short: a silent node must be named within it plus silentSlack.
const (
	faultTimeout = 6 * time.Second
	silentSlack  = 10 * time.Second
)

// emuCluster makes an emulated cluster of n nodes for the test, or skips
// it with the reason; the test's end removes it, killing what still runs
// on it (after the test has checked that nothing does).
func emuCluster(t *testing.T, n int) *emucluster.Cluster {
	t.Helper()
	c, err := emucluster.New(emucluster.Options{Nodes: n, Rate: 1e9, Name: "nf" + hostTag()})
	if errors.Is(err, emucluster.ErrUnsupported) {
		t.Skip("emulated cluster: ", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// nodeEnv is the environment of a process on a node of c: this one's,
// less whatever would place it in another job, plus env.
func nodeEnv(env ...string) []string {
	return append(withoutEnv(os.Environ(), append(placementVars, "HOROVOD_HEARTBEAT_TIMEOUT_SECONDS")...), env...)
}

// startNodes starts one gohorovodrun --nnodes launcher per node of c, each
// running worker with args.
func startNodes(t *testing.T, c *emucluster.Cluster, launcher string, env []string, perNode int, worker ...string) []*nodeRun {
	t.Helper()
	n := len(c.Nodes())
	runs := make([]*nodeRun, n)
	for i := 0; i < n; i++ {
		argv := append([]string{launcher, "--nnodes", strconv.Itoa(n), "--node-rank", strconv.Itoa(i),
			"--nproc-per-node", strconv.Itoa(perNode), "--master-addr", c.Nodes()[0].Host, "--master-port", "29470"}, worker...)
		cmd := c.Command(i, argv...)
		cmd.Env = env
		runs[i] = startRun(t, cmd)
	}
	return runs
}

// pidsIn lists the processes still running in node i's namespace.
func pidsIn(c *emucluster.Cluster, i int) string {
	out, _ := exec.Command("ip", "netns", "pids", c.Nodes()[i].NS).Output()
	return strings.TrimSpace(string(out))
}

// waitGone waits up to d for node i of c to run nothing.
func waitGone(t *testing.T, c *emucluster.Cluster, i int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for pidsIn(c, i) != "" {
		if time.Now().After(deadline) {
			pids := pidsIn(c, i)
			var cmds []string
			for _, p := range strings.Fields(pids) {
				b, _ := os.ReadFile("/proc/" + p + "/cmdline")
				cmds = append(cmds, p+": "+strings.ReplaceAll(string(b), "\x00", " "))
			}
			t.Fatalf("node %d still runs, %v after the job ended:\n%s", i, d, strings.Join(cmds, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestE2ENetworkSilentNodeEmbedded: 3 nodes on the embedded transport;
// node 2's link goes silent mid-training (no reset: its peers see nothing
// at all). The heartbeats find it, every other node's launcher ends the
// job naming rank 2 and its node as gone silent (not as a frozen process)
// within the heartbeat timeout plus 10 s, and nothing is left running on
// them; node 2, cut off, ends its own part too.
func TestE2ENetworkSilentNodeEmbedded(t *testing.T) {
	t.Parallel()
	launcher, worker := build(t)
	c := emuCluster(t, 3)
	env := nodeEnv("GOHOROVOD_SECRET="+newHexSecret(t),
		fmt.Sprintf("HOROVOD_HEARTBEAT_TIMEOUT_SECONDS=%d", int(faultTimeout.Seconds())))
	runs := startNodes(t, c, launcher, env, 1, worker, "train", t.TempDir())
	runs[0].waitFor(t, "node 0", "training 0", 60*time.Second)
	if err := c.Silence(2); err != nil {
		t.Fatal(err)
	}
	silenced := time.Now()
	for i := 0; i < 2; i++ {
		runs[i].wait(t, fmt.Sprintf("node %d", i), faultTimeout+silentSlack+20*time.Second)
		took := time.Since(silenced)
		all := runs[i].stdout.String() + runs[i].stderr.String()
		t.Logf("node %d's launcher ended %.1f s after node 2 went silent (%v)", i, took.Seconds(), runs[i].err)
		if runs[i].err == nil {
			t.Errorf("node %d's launcher succeeded; want the job failed\n%s", i, all)
		}
		if !strings.Contains(all, "rank 2: its node (host "+c.Nodes()[2].Host+") went silent") {
			t.Errorf("node %d does not say that rank 2's node went silent:\n%s", i, all)
		}
		if strings.Contains(all, "rank 2 (host") && strings.Contains(all, "froze") {
			t.Errorf("node %d calls a silent node a frozen process:\n%s", i, all)
		}
		if took > faultTimeout+silentSlack {
			t.Errorf("node %d ended %v after the silence, past the %v timeout plus %v", i, took, faultTimeout, silentSlack)
		}
		waitGone(t, c, i, 5*time.Second)
	}
	// Node 2 cannot be told; it finds rank 0 silent in turn and ends too.
	runs[2].wait(t, "node 2 (cut off)", faultTimeout+silentSlack+30*time.Second)
	t.Logf("node 2's launcher ended %.1f s after its link went silent (%v)", time.Since(silenced).Seconds(), runs[2].err)
	if runs[2].err == nil {
		t.Errorf("node 2's launcher succeeded")
	}
	waitGone(t, c, 2, 5*time.Second)
}

// TestE2ENetworkFlapEmbedded: node 1's link goes silent for half the
// heartbeat timeout, then comes back; TCP retransmits what was lost (the
// heartbeat and data connections cap the retransmission timer at a
// second, where the kernel allows) and the job finishes, every element of
// every step right.
func TestE2ENetworkFlapEmbedded(t *testing.T) {
	t.Parallel()
	launcher, worker := build(t)
	c := emuCluster(t, 2)
	env := nodeEnv("GOHOROVOD_SECRET="+newHexSecret(t),
		fmt.Sprintf("HOROVOD_HEARTBEAT_TIMEOUT_SECONDS=%d", int(faultTimeout.Seconds())))
	runs := startNodes(t, c, launcher, env, 1, worker, "train-steps", "80", "50ms", "65536")
	runs[0].waitFor(t, "node 0", "training 0", 60*time.Second)
	if err := c.Silence(1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(faultTimeout / 2)
	if err := c.Mend(1); err != nil {
		t.Fatal(err)
	}
	for i, r := range runs {
		r.wait(t, fmt.Sprintf("node %d", i), 90*time.Second)
		if r.err != nil {
			t.Errorf("node %d: %v after a flap of %v (timeout %v)\nstdout:\n%s\nstderr:\n%s", i, r.err, faultTimeout/2, faultTimeout, r.stdout.String(), r.stderr.String())
		}
	}
	if !strings.Contains(runs[0].stdout.String(), "trained 80 steps") {
		t.Errorf("rank 0 did not finish:\n%s", runs[0].stdout.String())
	}
}

// TestE2ENetworkLossEmbedded: every link drops 2% of its packets each
// way; the job still finishes with every element right.
func TestE2ENetworkLossEmbedded(t *testing.T) {
	t.Parallel()
	launcher, worker := build(t)
	c := emuCluster(t, 3)
	for i := range c.Nodes() {
		if err := c.SetLoss(i, 0.02); err != nil {
			t.Fatal(err)
		}
	}
	env := nodeEnv("GOHOROVOD_SECRET=" + newHexSecret(t))
	start := time.Now()
	runs := startNodes(t, c, launcher, env, 1, worker, "train-steps", "30", "0s", "1048576")
	for i, r := range runs {
		r.wait(t, fmt.Sprintf("node %d", i), 120*time.Second)
		if r.err != nil {
			t.Errorf("node %d: %v under 2%% loss\nstdout:\n%s\nstderr:\n%s", i, r.err, r.stdout.String(), r.stderr.String())
		}
	}
	if !strings.Contains(runs[0].stdout.String(), "trained 30 steps") {
		t.Errorf("rank 0 did not finish:\n%s", runs[0].stdout.String())
	}
	t.Logf("30 steps of 4 MiB across 3 nodes at 2%% loss: %.1f s", time.Since(start).Seconds())
}

// TestE2ENetworkSilentNodeMPI: the same silence under mpirun
// (gohorovodrun -H across 3 nodes, through the cluster's ssh stand-in):
// the heartbeats, not Open MPI's TCP timeouts (many minutes), end the job
// within the heartbeat timeout plus 10 s, naming rank 2's node, and
// nothing is left running on the nodes that can still be reached.
func TestE2ENetworkSilentNodeMPI(t *testing.T) {
	t.Parallel()
	launcher, worker := build(t)
	mpiWorker := filepath.Join(filepath.Dir(worker), "worker-mpi")
	if _, err := os.Stat(mpiWorker); err != nil {
		t.Skip("no MPI worker (mpicc or cgo missing)")
	}
	emu := buildEmucluster(t)
	c := emuCluster(t, 3)
	shim := t.TempDir()
	if _, err := emucluster.WriteSSHShim(shim, c.Options().Name, emu); err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, n := range c.Nodes() {
		hosts = append(hosts, n.Host+":1")
	}
	cmd := c.Command(0, launcher, "-np", "3", "-H", strings.Join(hosts, ","), mpiWorker, "train", t.TempDir())
	cmd.Env = nodeEnv("PATH="+shim+":"+os.Getenv("PATH"),
		fmt.Sprintf("HOROVOD_HEARTBEAT_TIMEOUT_SECONDS=%d", int(faultTimeout.Seconds())))
	// Open MPI's daemon on the silent node keeps the output pipe open
	// (nothing can reach it to end it, as over a real cut network: it goes
	// when its link returns, or here when the cluster is removed): once
	// the launcher has exited, stop reading.
	cmd.WaitDelay = 2 * time.Second
	run := startRun(t, cmd)
	run.waitFor(t, "mpirun job", "training 0", 90*time.Second)
	if err := c.Silence(2); err != nil {
		t.Fatal(err)
	}
	silenced := time.Now()
	run.wait(t, "the launcher", faultTimeout+silentSlack+20*time.Second)
	took := time.Since(silenced)
	all := run.stdout.String() + run.stderr.String()
	t.Logf("the launcher ended %.1f s after node 2 went silent (%v)", took.Seconds(), run.err)
	if run.err == nil {
		t.Errorf("the launcher succeeded; want the job failed\n%s", all)
	}
	if !strings.Contains(all, "rank 2: its node (host "+c.Nodes()[2].Host+") went silent") {
		t.Errorf("the job does not say that rank 2's node went silent:\n%s", all)
	}
	if took > faultTimeout+silentSlack {
		t.Errorf("the job ended %v after the silence, past the %v timeout plus %v", took, faultTimeout, silentSlack)
	}
	for i := 0; i < 2; i++ {
		waitGone(t, c, i, 10*time.Second)
	}
}

// buildEmucluster builds the emucluster command (the ssh stand-in runs
// it) beside the launcher.
func buildEmucluster(t *testing.T) string {
	t.Helper()
	launcher, _ := build(t)
	p := filepath.Join(filepath.Dir(launcher), "emucluster")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if out, err := exec.Command("go", "build", "-o", p, "../../cmd/emucluster").CombinedOutput(); err != nil {
		t.Fatalf("go build emucluster: %v\n%s", err, out)
	}
	return p
}

// TestE2ENetworkSilentNodeElastic: an elastic job of 3 nodes (--nnodes
// 2:3, one worker each) whose node 2 goes silent mid-training re-forms
// without it soon after the heartbeats find it (node 2 never confirms
// its worker's kill, so node 0 counts the worker lost rather than wait
// for node 2's connection to break), and finishes, every sample of every epoch trained exactly
// once; when node 2's link comes back after that, node 2 is refused
// cleanly (its launcher ends, saying so), not merged into the new group.
func TestE2ENetworkSilentNodeElastic(t *testing.T) {
	t.Parallel()
	launcher, worker := build(t)
	c := emuCluster(t, 3)
	env := nodeEnv("GOHOROVOD_SECRET="+newHexSecret(t),
		fmt.Sprintf("HOROVOD_HEARTBEAT_TIMEOUT_SECONDS=%d", int(faultTimeout.Seconds())))
	const n, epochs = 90, 8
	runs := make([]*nodeRun, 3)
	for i := range runs {
		cmd := c.Command(i, launcher, "--nnodes", "2:3", "--node-rank", strconv.Itoa(i), "--nproc-per-node", "1",
			"--master-addr", c.Nodes()[0].Host, "--master-port", "29471",
			worker, "elastic", "-n", strconv.Itoa(n), "-epochs", strconv.Itoa(epochs), "-batch", "3", "-sleep", "200ms")
		cmd.Env = env
		runs[i] = startRun(t, cmd)
	}
	// Wait for a round of all three nodes into the second epoch. Which
	// round that is depends on how the nodes met: round 1 holds those that
	// met first (all three, or two with the third joining as round 2).
	full := regexp.MustCompile(`step round=(\d+) epoch=[1-9]\d* pos=\d+ rank=0 size=3 `)
	var round int
	runs[0].waitUntil(t, "node 0", "a step of 3 workers past epoch 0", 90*time.Second, func(out string) bool {
		m := full.FindStringSubmatch(out)
		if m != nil {
			round, _ = strconv.Atoi(m[1])
		}
		return m != nil
	})
	if err := c.Silence(2); err != nil {
		t.Fatal(err)
	}
	silenced := time.Now()
	next := fmt.Sprintf("resume round=%d ", round+1)
	runs[0].waitFor(t, "node 0", next, faultTimeout+silentSlack+30*time.Second)
	took := time.Since(silenced)
	t.Logf("round %d of 3 nodes re-formed without node 2 %.1f s after its link went silent", round, took.Seconds())
	// The heartbeats find node 2's worker, node 0 tells node 2 to kill it
	// and, hearing nothing back within launch.KillConfirm, re-forms without it:
	// it does not wait for node 2's connection to break.
	if took > faultTimeout+launch.KillConfirm+7*time.Second {
		t.Errorf("re-formed %v after the silence, past the %v heartbeat timeout plus %v to confirm the kill and 7 s", took, faultTimeout, launch.KillConfirm)
	}
	if err := c.Mend(2); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // mended while the job goes on without it
	runs[0].wait(t, "node 0", 3*time.Minute)
	runs[1].wait(t, "node 1", 30*time.Second)
	runs[2].wait(t, "node 2", 60*time.Second)
	if !regexp.MustCompile(fmt.Sprintf(`step round=%d epoch=\d+ pos=\d+ rank=0 size=2 `, round+1)).MatchString(runs[0].stdout.String()) {
		t.Errorf("round %d is not of the 2 remaining workers:\n%s", round+1, runs[0].stdout.String())
	}
	if runs[0].err != nil || runs[1].err != nil {
		t.Fatalf("node 0: %v, node 1: %v\nnode 0's stderr:\n%s\nnode 1's stderr:\n%s", runs[0].err, runs[1].err, runs[0].stderr.String(), runs[1].stderr.String())
	}
	if runs[2].err == nil {
		t.Errorf("node 2, cut off and back, ended well; want it refused\n%s", runs[2].stderr.String())
	}
	t.Logf("node 2's last words: %s", lastLine(runs[2].stderr.String()))
	for _, want := range []string{"node 2 (host ", "did not report within 5s that "} {
		if !strings.Contains(runs[0].stderr.String(), want) {
			t.Errorf("node 0 did not log %q:\n%s", want, runs[0].stderr.String())
		}
	}
	recs := parseRecords(t, runs[0].stdout.String()+runs[1].stdout.String()+runs[2].stdout.String())
	sizes := checkCoverage(t, recs, n, epochs)
	t.Logf("group size per kept step, by epoch: %v", sizes)
	for i := range runs {
		waitGone(t, c, i, 10*time.Second)
	}
}

// TestE2EAcrossNodesUnevenMPI: 3 ranks on 2 nodes (-H n0:2,n1:1) under
// mpirun. Every rank takes the across-nodes data path alike (the job's
// node count decides, not a rank's cross group, which is one rank for
// node 0's second rank), Init's agreement check passes, rank 0 logs what
// it chose, and every element of every step is right.
func TestE2EAcrossNodesUnevenMPI(t *testing.T) {
	t.Parallel()
	launcher, worker := build(t)
	mpiWorker := filepath.Join(filepath.Dir(worker), "worker-mpi")
	if _, err := os.Stat(mpiWorker); err != nil {
		t.Skip("no MPI worker (mpicc or cgo missing)")
	}
	emu := buildEmucluster(t)
	c := emuCluster(t, 2)
	shim := t.TempDir()
	if _, err := emucluster.WriteSSHShim(shim, c.Options().Name, emu); err != nil {
		t.Fatal(err)
	}
	// The host tensors on MPI, on the TCP ring, and on whichever Init
	// measured faster (HOROVOD_CPU_OPERATIONS unset).
	for _, c2 := range []struct{ cpuOps, want string }{
		{"mpi", "the job spans nodes over MPI"},
		{"gloo", "host collectives travel over the TCP ring (HOROVOD_CPU_OPERATIONS=gloo)"},
		{"", "the faster of the two measured"},
	} {
		t.Run("cpu-operations="+c2.cpuOps, func(t *testing.T) {
			cmd := c.Command(0, launcher, "-np", "3", "-H", c.Nodes()[0].Host+":2,"+c.Nodes()[1].Host+":1",
				mpiWorker, "train-steps", "20", "0s", "1048576")
			cmd.Env = nodeEnv("PATH="+shim+":"+os.Getenv("PATH"), "HOROVOD_LOG_LEVEL=info", "HOROVOD_CPU_OPERATIONS="+c2.cpuOps)
			cmd.WaitDelay = 2 * time.Second
			run := startRun(t, cmd)
			run.wait(t, "the launcher", 2*time.Minute)
			all := run.stdout.String() + run.stderr.String()
			if run.err != nil {
				t.Fatalf("the job failed: %v\n%s", run.err, all)
			}
			// (The Open MPI parameters come on the launcher's mpirun
			// command here, so the workers find them set and log none
			// of their own.)
			for _, want := range []string{"trained 20 steps", c2.want} {
				if !strings.Contains(all, want) {
					t.Errorf("the job's output lacks %q:\n%s", want, all)
				}
			}
		})
	}
}
