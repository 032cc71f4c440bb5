//go:build linux

package launch_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/secret"
)

// hostTags numbers the namespaces' tags of this test process, so that
// tests that make namespaces run at once without sharing a name.
var hostTags atomic.Int32

// hostTag is a tag for one test's namespaces and interfaces, unique on
// this machine while the test runs: the process id and a count, at most
// 8 characters.
func hostTag() string {
	return fmt.Sprintf("%dx%d", os.Getpid()%100000, hostTags.Add(1)%100)
}

// netnsHosts makes n network namespaces joined by a bridge-less chain of
// veth pairs to the first (a star: host 0 at 10.77.0.1 reaches host i at
// 10.77.i.2 over its own pair), and returns their names and addresses, or
// skips the test with the reason when this machine does not allow it.
func netnsHosts(t *testing.T, n int) (names, addrs []string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("multi-host test: network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("multi-host test: no `ip` command (iproute2) to make network namespaces")
	}
	ip := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	tag := "ghv" + hostTag()
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%d", tag, i)
		if err := ip("netns", "add", name); err != nil {
			t.Skip("multi-host test: this machine does not allow network namespaces: ", err)
		}
		t.Cleanup(func() { ip("netns", "del", name) })
		names = append(names, name)
		if err := ip("-n", name, "link", "set", "lo", "up"); err != nil {
			t.Fatal(err)
		}
	}
	addrs = make([]string, n)
	addrs[0] = "10.77.0.1"
	for i := 1; i < n; i++ {
		a, b := fmt.Sprintf("%sa%d", tag, i), fmt.Sprintf("%sb%d", tag, i)
		hub := fmt.Sprintf("10.77.%d.1", i)
		addrs[i] = fmt.Sprintf("10.77.%d.2", i)
		for _, args := range [][]string{
			{"link", "add", a, "type", "veth", "peer", "name", b},
			{"link", "set", a, "netns", names[0]},
			{"link", "set", b, "netns", names[i]},
			{"-n", names[0], "addr", "add", hub + "/24", "dev", a},
			{"-n", names[i], "addr", "add", addrs[i] + "/24", "dev", b},
			{"-n", names[0], "link", "set", a, "up"},
			{"-n", names[i], "link", "set", b, "up"},
		} {
			if err := ip(args...); err != nil {
				t.Skip("multi-host test: cannot wire the namespaces: ", err)
			}
		}
	}
	// Host 0 answers on 10.77.0.1 too: a dummy address on its loopback.
	if err := ip("-n", names[0], "addr", "add", addrs[0]+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	// The other hosts reach 10.77.0.1 through their pair.
	for i := 1; i < n; i++ {
		if err := ip("-n", names[i], "route", "add", addrs[0]+"/32", "via", fmt.Sprintf("10.77.%d.1", i)); err != nil {
			t.Fatal(err)
		}
	}
	return names, addrs
}

// TestE2EEmbeddedMultiHost: two hosts (network namespaces on this
// machine, each with its own address), two workers on each, on the
// embedded transport: TCP between the hosts, Unix sockets within one. The
// rendezvous server and the workers are started directly in their
// namespaces (ssh between namespaces would need an sshd in each; the
// launcher's ssh path is covered by its plan tests), as a scheduler other
// than gohorovodrun would start them (docs/EMBEDDED.md).
func TestE2EEmbeddedMultiHost(t *testing.T) {
	t.Parallel()
	_, worker := build(t)
	names, addrs := netnsHosts(t, 2)
	secret, err := secret.New()
	if err != nil {
		t.Fatal(err)
	}
	const perHost = 2
	var slots []string
	for _, a := range addrs {
		for lr := 0; lr < perHost; lr++ {
			slots = append(slots, fmt.Sprintf("%s:%d", a, lr))
		}
	}
	server := exec.Command("ip", "netns", "exec", names[0], worker, "rdzv-server", addrs[0]+":29555", secret, strings.Join(slots, ","))
	var serr bytes.Buffer
	server.Stderr = &serr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Process.Kill()
	var mu sync.Mutex
	var lines []string
	var wg sync.WaitGroup
	errs := make(chan error, len(slots))
	for h, a := range addrs {
		for lr := 0; lr < perHost; lr++ {
			cmd := exec.Command("ip", "netns", "exec", names[h], worker, "hvd-allreduce")
			cmd.Env = append(withoutEnv(os.Environ(), "HOROVOD_CONTROLLER"),
				"HOROVOD_CONTROLLER=gloo", "HOROVOD_GLOO_RENDEZVOUS_ADDR="+addrs[0], "HOROVOD_GLOO_RENDEZVOUS_PORT=29555",
				"GOHOROVOD_SECRET="+secret, "HOROVOD_HOSTNAME="+a, fmt.Sprintf("HOROVOD_LOCAL_RANK=%d", lr),
				"GOHOROVOD_GLOO_ADDR="+a, "HOROVOD_GLOO_TIMEOUT_SECONDS=30")
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := cmd.CombinedOutput()
				mu.Lock()
				lines = append(lines, strings.TrimSpace(string(out)))
				mu.Unlock()
				if err != nil {
					errs <- fmt.Errorf("worker on %s: %v\n%s", a, err, out)
				}
			}()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatalf("the workers did not finish; so far:\n%s", strings.Join(lines, "\n"))
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := server.Wait(); err != nil {
		t.Errorf("rendezvous server: %v\n%s", err, serr.String())
	}
	wantTwoByTwo(t, lines, func(int) string { return "" })
}
