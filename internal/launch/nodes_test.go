package launch

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/launch/elastic"
	"github.com/gohorovod/gohorovod/runtime/config"
)

func lookupOf(env ...string) func(string) (string, bool) {
	return config.Lookup(env)
}

func TestNodesFrom(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  []string
		want Nodes
		off  bool // an ordinary launch
	}{
		{name: "flags", args: []string{"--nnodes", "3", "--node-rank", "2", "--nproc-per-node", "4", "--master-addr", "m0", "--master-port", "1234"},
			want: Nodes{N: 3, Min: 3, Rank: 2, PerNode: 4, MasterAddr: "m0", MasterPort: 1234}},
		{name: "elastic MIN:MAX", args: []string{"--nnodes", "1:3", "--master-addr", "m"},
			want: Nodes{N: 3, Min: 1, PerNode: 1, MasterAddr: "m", MasterPort: DefaultMasterPort}},
		{name: "torchrun's defaults for one node", args: []string{"--nnodes", "1"},
			want: Nodes{N: 1, Min: 1, Rank: 0, PerNode: 1, MasterAddr: "127.0.0.1", MasterPort: DefaultMasterPort}},
		{name: "MIN:MAX with MIN equal to MAX", args: []string{"--nnodes", "2:2", "--master-addr", "m"},
			want: Nodes{N: 2, Min: 2, PerNode: 1, MasterAddr: "m", MasterPort: DefaultMasterPort}},
		{name: "TrainJob: PET_ only", env: []string{"PET_NNODES=2", "PET_NODE_RANK=1", "PET_NPROC_PER_NODE=3", "PET_MASTER_ADDR=job-node-0-0.job", "PET_MASTER_PORT=29400"},
			want: Nodes{N: 2, Min: 2, Rank: 1, PerNode: 3, MasterAddr: "job-node-0-0.job", MasterPort: 29400}},
		{name: "PyTorchJob: PET_ and MASTER_, PET_ first", env: []string{"PET_NNODES=2", "PET_NODE_RANK=1", "PET_NPROC_PER_NODE=2",
			"PET_MASTER_ADDR=a", "PET_MASTER_PORT=1111", "MASTER_ADDR=b", "MASTER_PORT=2222", "RANK=1", "WORLD_SIZE=2"},
			want: Nodes{N: 2, Min: 2, Rank: 1, PerNode: 2, MasterAddr: "a", MasterPort: 1111}},
		{name: "MASTER_ fallbacks", env: []string{"PET_NNODES=2", "MASTER_ADDR=b", "MASTER_PORT=2222"},
			want: Nodes{N: 2, Min: 2, PerNode: 1, MasterAddr: "b", MasterPort: 2222}},
		{name: "flags win over the variables", args: []string{"--nnodes", "4", "--node-rank", "3", "--nproc-per-node", "1", "--master-addr", "f", "--master-port", "5"},
			env:  []string{"PET_NNODES=2", "PET_NODE_RANK=1", "PET_NPROC_PER_NODE=2", "PET_MASTER_ADDR=a", "PET_MASTER_PORT=1111"},
			want: Nodes{N: 4, Min: 4, Rank: 3, PerNode: 1, MasterAddr: "f", MasterPort: 5}},
		{name: "nproc auto is the CPUs", env: []string{"PET_NNODES=1", "PET_NPROC_PER_NODE=auto"},
			want: Nodes{N: 1, Min: 1, PerNode: 8, MasterAddr: "127.0.0.1", MasterPort: DefaultMasterPort}},
		{name: "--insecure-secret", args: []string{"--nnodes", "2", "--master-addr", "m", "--insecure-secret"},
			want: Nodes{N: 2, Min: 2, PerNode: 1, MasterAddr: "m", MasterPort: DefaultMasterPort, Insecure: true}},
		{name: "ordinary launch", args: []string{"-np", "2"}, off: true},
		{name: "-np wins over an inherited PET_NNODES", args: []string{"-np", "2"}, env: []string{"PET_NNODES=2"}, off: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := Parse(append(tc.args, "./train"), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			n, ok, err := NodesFrom(o, lookupOf(tc.env...), 8)
			if err != nil {
				t.Fatal(err)
			}
			if ok == tc.off {
				t.Fatalf("multi-node %v, want %v", ok, !tc.off)
			}
			if ok && n != tc.want {
				t.Fatalf("got %+v\nwant %+v", n, tc.want)
			}
		})
	}
}

func TestNodesFromRefuses(t *testing.T) {
	tests := []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--nnodes", "2", "--node-rank", "2", "--master-addr", "m"}, nil, "node rank 2 (--node-rank) is out of range: a job of 2 nodes has node ranks 0 to 1"},
		{[]string{"--nnodes", "2", "--node-rank", "-1", "--master-addr", "m"}, nil, "out of range"},
		{nil, []string{"PET_NNODES=2", "PET_NODE_RANK=5", "PET_MASTER_ADDR=m"}, "node rank 5 (PET_NODE_RANK) is out of range"},
		{nil, []string{"PET_NNODES=4:2", "PET_MASTER_ADDR=m"}, `PET_NNODES="4:2": MIN is more than MAX`},
		{[]string{"--nnodes", "1:x"}, nil, `--nnodes="1:x": want a number of nodes`},
		{[]string{"--nnodes", "x"}, nil, `--nnodes="x": want a number of nodes`},
		{[]string{"--nnodes", "0"}, nil, "at least 1 node"},
		{[]string{"--nnodes", "2"}, nil, "needs the address of node 0: give --master-addr"},
		{[]string{"--nnodes", "2", "--master-addr", "m", "--master-port", "70000"}, nil, "master port 70000 (--master-port) is not a port"},
		{nil, []string{"PET_NNODES=2", "PET_MASTER_ADDR=m", "PET_MASTER_PORT=http"}, `PET_MASTER_PORT="http" is not a port number`},
		{[]string{"--nnodes", "2", "--master-addr", "m", "--nproc-per-node", "0"}, nil, "0 workers per node (--nproc-per-node): want at least 1"},
		{nil, []string{"PET_NNODES=2", "PET_MASTER_ADDR=m", "PET_NPROC_PER_NODE=gpu"}, "PET_NPROC_PER_NODE=gpu"},
		{nil, []string{"PET_NNODES=2", "PET_MASTER_ADDR=m", "PET_NODE_RANK=one"}, `PET_NODE_RANK="one" is not a node rank`},
		{[]string{"--nnodes", "2", "-np", "4", "--master-addr", "m"}, nil, "--nnodes and --num-proc both given"},
		{[]string{"--nnodes", "2", "-H", "a:2", "--master-addr", "m"}, nil, "--nnodes and --hosts both given"},
		{[]string{"--node-rank", "1"}, nil, "--node-rank needs --nnodes"},
		{[]string{"--master-addr", "m"}, nil, "--master-addr needs --nnodes"},
	}
	for _, tc := range tests {
		o, err := Parse(append(tc.args, "./train"), io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		_, _, err = NodesFrom(o, lookupOf(tc.env...), 8)
		if err == nil || !IsUsage(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: got %v, want a usage error with %q", tc.args, tc.env, err, tc.want)
		}
	}
}

func TestNodesSecret(t *testing.T) {
	n := Nodes{N: 2, MasterAddr: "m", MasterPort: 29500}
	given := strings.Repeat("ab", 32)
	if s, err := NodesSecret(n, lookupOf("GOHOROVOD_SECRET="+given)); err != nil || s != given {
		t.Fatalf("GOHOROVOD_SECRET: %q %v", s, err)
	}
	if _, err := NodesSecret(n, lookupOf("GOHOROVOD_SECRET=abcd")); err == nil || !IsUsage(err) {
		t.Fatalf("a short secret: %v", err)
	}
	if _, err := NodesSecret(n, lookupOf()); err == nil || !IsUsage(err) || !strings.Contains(err.Error(), "--insecure-secret") {
		t.Fatalf("two nodes and no secret: %v", err)
	}
	// One node: a fresh secret each time.
	a, errA := NodesSecret(Nodes{N: 1}, lookupOf())
	b, errB := NodesSecret(Nodes{N: 1}, lookupOf())
	if errA != nil || errB != nil || a == b || len(a) != 64 {
		t.Fatalf("one node: %q %q %v %v", a, b, errA, errB)
	}
	// Insecure: the same on every node of the job, another for another
	// master.
	n.Insecure = true
	x, _ := NodesSecret(n, lookupOf())
	y, _ := NodesSecret(n, lookupOf())
	n.MasterPort++
	z, _ := NodesSecret(n, lookupOf())
	if x != y || x == z || len(x) != 64 {
		t.Fatalf("insecure secrets %q %q %q", x, y, z)
	}
}

func TestNodeLabelsAndRanks(t *testing.T) {
	if got := NodeLabels([]string{"a", "b", "c"}); strings.Join(got, ",") != "a,b,c" {
		t.Errorf("distinct hosts: %v", got)
	}
	if got := NodeLabels([]string{"pod", "pod", "x", ""}); strings.Join(got, ",") != "pod-node0,pod-node1,x,node3" {
		t.Errorf("same host names: %v", got)
	}
	// horovodrun's placement: node by node, local ranks contiguous.
	slots, err := Assign(NodeHosts([]string{"n0", "n1", "n2"}, 2), 6)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range slots {
		if s.Rank != i || s.Host != []string{"n0", "n1", "n2"}[i/2] || s.LocalRank != i%2 || s.LocalSize != 2 || s.CrossRank != i/2 || s.CrossSize != 3 || s.Size != 6 {
			t.Errorf("slot %d: %+v", i, s)
		}
	}
}

func TestNodeError(t *testing.T) {
	e := &NodeError{NodeRank: 1, Host: "h1", Err: &WorkerError{Rank: 3, Code: 7, Host: "h1"}}
	if !strings.HasPrefix(e.Error(), "node 1 (host h1) failed: rank 3") || !strings.HasSuffix(e.Error(), "the job was stopped on every node") {
		t.Errorf("%q", e.Error())
	}
	if ExitCode(e) != 7 {
		t.Errorf("exit code %d, want the rank's 7", ExitCode(e))
	}
}

func TestRunNodesDryRun(t *testing.T) {
	f := newFixture(t, "GOHOROVOD_SECRET="+strings.Repeat("cd", 32))
	err := f.l.Run(context.Background(), []string{"--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2", "--master-addr", "m", "--dry-run", f.prog})
	if err != nil {
		t.Fatal(err)
	}
	out := f.out.String()
	for _, want := range []string{"[rank 2 on ", "[rank 3 on ", "HOROVOD_GLOO_RENDEZVOUS_ADDR=m", "GOHOROVOD_SECRET=[redacted]", "HOROVOD_CROSS_RANK=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "[rank 0 on") || strings.Contains(out, "cdcdcd") {
		t.Errorf("node 1's dry run shows node 0's ranks or the secret:\n%s", out)
	}
	if f.ran() {
		t.Error("mpirun ran")
	}
	f = newFixture(t)
	err = f.l.Run(context.Background(), []string{"--nnodes", "2", "--master-addr", "m", "--mpi", f.prog})
	if !IsUsage(err) || !strings.Contains(err.Error(), "drop --mpi") {
		t.Errorf("--nnodes with --mpi: %v", err)
	}
}

// TestRunMPIJobHostfile: on an MPIJob's launcher pod the MPI Operator
// sets OMPI_MCA_orte_default_hostfile; without -H or --hostfile the
// launcher takes its hosts from that file, in Open MPI's syntax.
func TestRunMPIJobHostfile(t *testing.T) {
	dir := t.TempDir()
	hf := filepath.Join(dir, "hostfile")
	text := "# written by the MPI Operator\njob-worker-0.job.default.svc slots=2\njob-worker-1.job.default.svc slots=2 max_slots=4\n"
	if err := os.WriteFile(hf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, "OMPI_MCA_orte_default_hostfile="+hf)
	f.l.IsLocal = func(string) bool { return false }
	if err := f.l.Run(context.Background(), []string{"-np", "4", "--dry-run", f.prog}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.out.String(), "-H job-worker-0.job.default.svc:2,job-worker-1.job.default.svc:2") {
		t.Errorf("the MPIJob's hosts are not used:\n%s", f.out.String())
	}
	// -H wins over the variable.
	f = newFixture(t, "OMPI_MCA_orte_default_hostfile="+hf)
	if err := f.l.Run(context.Background(), []string{"-np", "1", "-H", "localhost:1", "--dry-run", f.prog}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(f.out.String(), "job-worker") {
		t.Errorf("-H did not win:\n%s", f.out.String())
	}
	// A variable naming a missing file is a clear error.
	f = newFixture(t, "OMPI_MCA_orte_default_hostfile="+filepath.Join(dir, "none"))
	if err := f.l.Run(context.Background(), []string{"-np", "1", f.prog}); !IsUsage(err) || !strings.Contains(err.Error(), "OMPI_MCA_orte_default_hostfile") {
		t.Errorf("missing hostfile: %v", err)
	}
}

func TestLinkSilenceOutlastsTheHeartbeats(t *testing.T) {
	for hb, want := range map[time.Duration]time.Duration{
		0:                60 * time.Second,
		6 * time.Second:  15 * time.Second,
		30 * time.Second: 35 * time.Second,
	} {
		if got := LinkSilence(hb); got != want {
			t.Errorf("heartbeat timeout %v: %v, want %v", hb, got, want)
		}
	}
}

// TestAwaitKill: a node that has not reported the end of a worker node 0
// told it to kill, within the time given, is dropped: its workers count as
// lost (status 255), it is told why and its connection is closed. A report
// that came first, the job's end or the node's own end leave it be.
func TestAwaitKill(t *testing.T) {
	const d = 20 * time.Millisecond
	setup := func(t *testing.T) (*elasticNodes, *memberNode, *elasticProc, *strings.Builder, net.Conn) {
		var log strings.Builder
		p := &elasticProc{slot: elastic.Slot{Host: "h-node2", Local: 1}}
		p0 := &elasticProc{slot: elastic.Slot{Host: "h-node2", Local: 0}}
		ours, theirs := net.Pipe()
		t.Cleanup(func() { ours.Close(); theirs.Close() })
		m := &memberNode{rank: 2, name: "h-node2", nc: newNodeConn(ours), procs: map[int]*elasticProc{0: p0, 1: p}}
		en := &elasticNodes{l: &Launcher{Stderr: &log}, nodes: map[string]*memberNode{m.name: m},
			job: &elasticJob{exits: make(chan elasticExit, 2), release: make(chan struct{})}}
		return en, m, p, &log, theirs
	}
	t.Run("no report", func(t *testing.T) {
		en, m, p, log, theirs := setup(t)
		told := make(chan nodeMsg, 1)
		go func() {
			msg, _ := newNodeConn(theirs).recv()
			told <- msg
		}()
		en.awaitKill(p, d)
		lost := map[int]bool{}
		for range 2 {
			select {
			case x := <-en.job.exits:
				var re *remoteExitError
				if !errors.As(x.err, &re) || re.Status != 255 {
					t.Errorf("exit %+v, want the worker lost with status 255", x)
				}
				lost[x.p.slot.Local] = true
			case <-time.After(5 * time.Second):
				t.Fatal("the node's workers were not counted lost")
			}
		}
		if !lost[0] || !lost[1] {
			t.Errorf("lost %v, want both workers of the node", lost)
		}
		msg := <-told
		if !strings.Contains(msg.Dropped, "did not report within 20ms that h-node2[1], declared frozen by the job, was killed") {
			t.Errorf("the node was told %+v", msg)
		}
		if _, err := theirs.Read(make([]byte, 1)); err == nil {
			t.Error("the node's connection is still open")
		}
		en.mu.Lock()
		defer en.mu.Unlock()
		if !m.gone || !m.dropped || len(m.procs) != 0 {
			t.Errorf("the node: gone %v, dropped %v, workers %v; want it gone, dropped, with none", m.gone, m.dropped, m.procs)
		}
		if want := "dropped node 2 (host h-node2): it did not report within 20ms"; !strings.Contains(log.String(), want) {
			t.Errorf("logged %q, want %q", log.String(), want)
		}
	})
	for _, tc := range []struct {
		name  string
		first func(*elasticNodes, *memberNode)
	}{
		{"reported first", func(_ *elasticNodes, m *memberNode) { delete(m.procs, 1) }},
		{"job over", func(en *elasticNodes, _ *memberNode) { en.over = true }},
		{"node gone", func(_ *elasticNodes, m *memberNode) { m.gone, m.procs = true, nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			en, m, p, log, _ := setup(t)
			en.mu.Lock()
			tc.first(en, m)
			en.mu.Unlock()
			en.awaitKill(p, d)
			select {
			case x := <-en.job.exits:
				t.Errorf("counted lost: %+v", x)
			case <-time.After(10 * d):
			}
			en.mu.Lock()
			defer en.mu.Unlock()
			if log.Len() != 0 || m.dropped {
				t.Errorf("dropped the node (%q)", log.String())
			}
		})
	}
}

// TestElasticMemberEnd: a node of an elastic job ends well only when node
// 0 said the job ended well before closing the meeting; a meeting that
// just ends is node 0 lost, and a node dropped from the job says why.
func TestElasticMemberEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		msgs []nodeMsg
		want string // "" for success
	}{
		{"done", []nodeMsg{{Done: true}}, ""},
		{"no word", nil, "node 2: lost node 0's launcher at m0:0 (EOF)"},
		{"failed", []nodeMsg{{Failed: "rank 3 exited with status 1", FailedNode: 1, FailedHost: "h1"}}, "node 1 (host h1) failed: rank 3 exited with status 1"},
		{"dropped", []nodeMsg{{Dropped: "it did not report"}}, "node 2: node 0 dropped this node from the job: it did not report"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ours, theirs := net.Pipe()
			defer ours.Close()
			r := &elasticMemberRun{nodeBase: nodeBase{l: &Launcher{Stderr: io.Discard}, n: Nodes{Rank: 2, MasterAddr: "m0"}},
				nc: newNodeConn(ours)}
			if err := r.start(context.Background(), &teardown{}); err != nil {
				t.Fatal(err)
			}
			go func() {
				nc := newNodeConn(theirs)
				for _, m := range tc.msgs {
					_ = nc.send(m)
				}
				theirs.Close()
			}()
			done := make(chan error, 1)
			go func() { done <- r.watch(context.Background(), nil) }()
			select {
			case err := <-done:
				if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
					t.Errorf("ended with %v, want %q", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the node did not end")
			}
		})
	}
}

// TestDropOverTCP: dropping a node over a real connection tells it why,
// ends its write half (the node reads the reason, then the end) and stops
// node 0's watcher of it at once, though the node has not closed its end.
func TestDropOverTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	theirs, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	ours, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer ours.Close()
	m := &memberNode{rank: 1, name: "h-node1", nc: newNodeConn(ours), procs: map[int]*elasticProc{}}
	en := &elasticNodes{l: &Launcher{Stderr: io.Discard}, nodes: map[string]*memberNode{m.name: m},
		job: &elasticJob{exits: make(chan elasticExit, 1), release: make(chan struct{})}}
	watched := make(chan error, 1)
	go func() { watched <- en.watch(m) }()
	en.drop(m, nil, "for the test")
	select {
	case <-watched:
	case <-time.After(5 * time.Second):
		t.Fatal("node 0 still watches the dropped node")
	}
	nc := newNodeConn(theirs)
	if msg, err := nc.recv(); err != nil || msg.Dropped != "for the test" {
		t.Fatalf("the node read %+v, %v; want the reason", msg, err)
	}
	if _, err := nc.recv(); err != io.EOF {
		t.Errorf("after the reason the node read %v, want the end of the connection", err)
	}
}
