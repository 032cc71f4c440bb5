package launch

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/config"
)

const testSecret = "00112233445566778899aabbccddeeff"

func glooSpec(hosts []Host, np int, local ...string) Spec {
	isLocal := map[string]bool{}
	for _, h := range local {
		isLocal[h] = true
	}
	return Spec{
		Gloo: true, NP: np, Hosts: hosts, Command: []string{"./train", "--epochs", "2"},
		Config: config.Default(), Launcher: "1:2:b:pid:[3]",
		Environ: []string{"PATH=/usr/bin", "HOME=/home/me", "LD_LIBRARY_PATH=/opt/lib", "HOROVOD_RANK=7",
			"HOROVOD_CONTROLLER=mpi", "GOHOROVOD_SECRET=ffffffffffffffffffffffffffffffff", "SSH_AUTH_SOCK=/tmp/a"},
		IsLocal:        func(h string) bool { return isLocal[h] },
		RendezvousAddr: "10.0.0.1", RendezvousPort: 4242, Secret: testSecret, Dir: "/work/job",
	}
}

// envOf reads one variable of a "K=V" list (the last one wins, as exec).
func envOf(env []string, k string) (string, bool) { return config.Lookup(env)(k) }

func TestGlooPlanLocal(t *testing.T) {
	ws, err := BuildGlooPlan(glooSpec([]Host{{"localhost", 3}}, 3, "localhost"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 3 {
		t.Fatalf("%d workers", len(ws))
	}
	for r, w := range ws {
		if w.Remote || w.Stdin != "" || !reflect.DeepEqual(w.Argv, []string{"./train", "--epochs", "2"}) {
			t.Errorf("rank %d: %+v", r, w)
		}
		want := map[string]string{
			"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo",
			"HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "4242",
			"HOROVOD_GLOO_TIMEOUT_SECONDS": "30", "HOROVOD_HOSTNAME": "localhost",
			"HOROVOD_RANK": strconv.Itoa(r), "HOROVOD_SIZE": "3", "HOROVOD_LOCAL_RANK": strconv.Itoa(r), "HOROVOD_LOCAL_SIZE": "3",
			"HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "1", "GOHOROVOD_SECRET": testSecret,
			"GOHOROVOD_LAUNCHER": "1:2:b:pid:[3]", "HOME": "/home/me", "LD_LIBRARY_PATH": "/opt/lib",
		}
		for k, v := range want {
			if got, _ := envOf(w.Env, k); got != v {
				t.Errorf("rank %d: %s=%q, want %q", r, k, got, v)
			}
		}
		// The launcher's stale values are not passed on at all.
		for _, kv := range w.Env {
			if kv == "HOROVOD_RANK=7" || kv == "HOROVOD_CONTROLLER=mpi" || strings.HasPrefix(kv, "GOHOROVOD_SECRET=ffff") {
				t.Errorf("rank %d inherits %s", r, kv)
			}
		}
		c, err := config.FromEnv(config.Lookup(w.Env))
		if err != nil || !c.Gloo() || c.Rank != r {
			t.Errorf("rank %d: the worker reads %+v, %v", r, c, err)
		}
	}
}

// TestGlooPlanRemote: Horovod's heterogeneous layout, one local host and
// one remote: the remote workers run through ssh, their placement on the
// command line, their secret on standard input only.
func TestGlooPlanRemote(t *testing.T) {
	s := glooSpec([]Host{{"w0", 1}, {"w1", 2}}, 3, "w0")
	s.SSHPort, s.SSHIdentity, s.NICs = 2222, "/k", []string{"eth1", "eth2"}
	ws, err := BuildGlooPlan(s)
	if err != nil {
		t.Fatal(err)
	}
	place := [][6]string{{"0", "3", "0", "1", "0", "2"}, {"1", "3", "0", "2", "1", "2"}, {"2", "3", "1", "2", "0", "1"}}
	vars := []string{"HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE"}
	if ws[0].Remote {
		t.Fatal("w0 is local")
	}
	for i, v := range vars {
		if got, _ := envOf(ws[0].Env, v); got != place[0][i] {
			t.Errorf("rank 0 %s=%s, want %s", v, got, place[0][i])
		}
	}
	if got, _ := envOf(ws[0].Env, "HOROVOD_GLOO_IFACE"); got != "eth1" {
		t.Errorf("HOROVOD_GLOO_IFACE=%q", got)
	}
	for r, w := range ws[1:] {
		r++
		wantHead := []string{"ssh", "-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no",
			"-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-p", "2222", "-i", "/k", "w1"}
		if !w.Remote || len(w.Argv) != len(wantHead)+1 || !reflect.DeepEqual(w.Argv[:len(wantHead)], wantHead) {
			t.Fatalf("rank %d argv %q", r, w.Argv)
		}
		cmd := w.Argv[len(w.Argv)-1]
		if !strings.HasPrefix(cmd, "exec /bin/sh -c '") {
			t.Errorf("rank %d runs %q", r, cmd)
		}
		for i, v := range vars {
			if !strings.Contains(cmd, " "+v+"="+place[r][i]+" ") {
				t.Errorf("rank %d: the command lacks %s=%s: %s", r, v, place[r][i], cmd)
			}
		}
		for _, want := range []string{"HOROVOD_HOSTNAME=w1", "HOROVOD_GLOO_IFACE=eth1", "NCCL_SOCKET_IFNAME=eth1,eth2",
			"LD_LIBRARY_PATH=/opt/lib", "cd /work/job", "./train --epochs 2"} {
			if !strings.Contains(cmd, want) {
				t.Errorf("rank %d: the command lacks %q", r, want)
			}
		}
		for _, bad := range []string{testSecret, "HOME=", "SSH_AUTH_SOCK", "HOROVOD_CONTROLLER=mpi"} {
			if strings.Contains(cmd, bad) {
				t.Errorf("rank %d: the command has %q", r, bad)
			}
		}
		if w.Stdin != testSecret+"\n" {
			t.Errorf("rank %d stdin %q", r, w.Stdin)
		}
		if got, _ := envOf(w.Env, "SSH_AUTH_SOCK"); got != "/tmp/a" {
			t.Errorf("ssh's own environment lacks SSH_AUTH_SOCK: %q", w.Env)
		}
	}
	for _, line := range DescribeGlooPlan(ws) {
		if strings.Contains(line, testSecret) {
			t.Errorf("the description shows the secret: %s", line)
		}
	}
	if d := DescribeGlooPlan(ws)[0]; !strings.Contains(d, "GOHOROVOD_SECRET=[redacted]") || !strings.HasPrefix(d, "[rank 0 on w0] ") {
		t.Errorf("description %q", d)
	}
}

func TestGlooPlanRefuses(t *testing.T) {
	s := glooSpec([]Host{{"localhost", 2}}, 3, "localhost")
	if _, err := BuildGlooPlan(s); !IsUsage(err) || !strings.Contains(err.Error(), "more processes (3) than there are available slots (2)") {
		t.Errorf("too many processes: %v", err)
	}
	s = glooSpec([]Host{{"localhost", 2}}, 2, "localhost")
	s.Secret = ""
	if _, err := BuildGlooPlan(s); err == nil {
		t.Error("a plan without a secret")
	}
}

// TestRemoteScript runs the remote workers' script with the local /bin/sh:
// the program sees the secret read from standard input and its variables,
// and is stopped with SIGTERM when standard input closes (the launcher
// stopped the job, or ssh went away).
func TestRemoteScript(t *testing.T) {
	script := remoteScript(t.TempDir(), []string{"FOO=b a r"}, []string{"sh", "-c", `echo "$GOHOROVOD_SECRET|$FOO|$(pwd)"; exec sleep 30`})
	cmd := exec.Command("/bin/sh", "-c", script)
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer cmd.Process.Kill()
	io.WriteString(stdin, testSecret+"\n")
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, testSecret+"|b a r|/") {
		t.Fatalf("the program said %q, %v", line, err)
	}
	stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the program still runs 10 s after its input closed")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("the script ended with %v, want status 143", err)
	}
}

// TestRunChoosesTransport: --gloo, --mpi, and the automatic choice when
// mpirun is missing (with the one log line), under --dry-run.
func TestRunChoosesTransport(t *testing.T) {
	const auto = "gohorovodrun: mpirun not found on PATH: running the workers on the embedded transport (--gloo)\n"
	noMPI := func(name string) (string, error) {
		if name == "mpirun" {
			return "", errors.New("not found")
		}
		return exec.LookPath(name)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		hasMPI bool
		gloo   bool
		stderr string
		err    string
	}{
		{"mpi by default", []string{"--dry-run", "-np", "2"}, true, false, "", ""},
		{"--gloo", []string{"--gloo", "--dry-run", "-np", "2"}, true, true, "", ""},
		{"no mpirun", []string{"--dry-run", "-np", "2"}, false, true, auto, ""},
		{"--mpi without mpirun", []string{"--mpi", "--dry-run", "-np", "2"}, false, false, "", "mpirun not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if !tc.hasMPI {
				f.l.LookPath = noMPI
			}
			err := f.l.Run(context.Background(), append(tc.args, f.prog))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Run = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Run = %v (stderr %s)", err, f.err.String())
			}
			out := f.out.String()
			if gloo := strings.HasPrefix(out, "[rank 0 on localhost] "); gloo != tc.gloo {
				t.Errorf("gloo %v, want %v: %s", gloo, tc.gloo, out)
			}
			if tc.gloo && (!strings.Contains(out, "GOHOROVOD_SECRET=[redacted]") || !strings.Contains(out, "HOROVOD_GLOO_RENDEZVOUS_ADDR=127.0.0.1 ")) {
				t.Errorf("plan %s", out)
			}
			if f.err.String() != tc.stderr {
				t.Errorf("stderr %q, want %q", f.err.String(), tc.stderr)
			}
		})
	}
}

// TestOversubscribedGOMAXPROCS: workers of this machine get GOMAXPROCS=1
// when there are more of them than CPUs, unless the user set GOMAXPROCS;
// otherwise nothing is added.
func TestOversubscribedGOMAXPROCS(t *testing.T) {
	cases := []struct {
		env         []string
		local, cpus int
		want        string
	}{
		{nil, 128, 2, "GOMAXPROCS=1"},
		{nil, 3, 2, "GOMAXPROCS=1"},
		{nil, 2, 2, ""},
		{nil, 1, 16, ""},
		{[]string{"GOMAXPROCS=4"}, 128, 2, ""},
		{nil, 128, 0, ""},
	}
	for _, c := range cases {
		got, ok := oversubscribed(c.env, c.local, c.cpus)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("oversubscribed(%v, %d workers, %d CPUs) = %q %v, want %q", c.env, c.local, c.cpus, got, ok, c.want)
		}
	}
	old := localCPUs
	localCPUs = func() int { return 2 }
	t.Cleanup(func() { localCPUs = old })
	sl := Slot{Host: "localhost", LocalSize: 4}
	w := glooWorker(Spec{IsLocal: func(string) bool { return true }, Command: []string{"train"}}, config.Config{}, sl, []string{"PATH=/bin"}, nil)
	if !slices.Contains(w.Env, "GOMAXPROCS=1") {
		t.Errorf("a local worker of 4 on 2 CPUs has no GOMAXPROCS=1: %v", w.Env)
	}
}
