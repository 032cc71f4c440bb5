package launch

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SSHRunner runs one command (argv) and returns its combined output. The
// default runs the process; tests inject a fake.
type SSHRunner func(ctx context.Context, argv []string) ([]byte, error)

// ExecRunner is the SSHRunner that runs the real command.
func ExecRunner(ctx context.Context, argv []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = nil
	cmd.WaitDelay = time.Second
	return cmd.CombinedOutput()
}

// SSHCheck describes the reachability check run before launching on remote
// hosts: `ssh -o PasswordAuthentication=no -o StrictHostKeyChecking=no
// -o ConnectTimeout=10 [-p port] [-i key] host true`, up to Attempts times
// per host, all hosts in parallel, within the caller's deadline.
type SSHCheck struct {
	Port     int
	Identity string
	Attempts int           // default 5
	Retry    time.Duration // pause between attempts; default 1 s
	Run      SSHRunner     // default ExecRunner
}

// Command is the ssh command that probes host.
func (c SSHCheck) Command(host string) []string {
	return append(sshArgv(c.Port, c.Identity, host), "true")
}

// sshArgv is ssh with the launcher's options, up to the host: the probe
// and the remote workers of the embedded transport use the same.
func sshArgv(port int, identity, host string) []string {
	argv := []string{"ssh", "-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no",
		"-o", "BatchMode=yes", "-o", "ConnectTimeout=10"}
	if port > 0 {
		argv = append(argv, "-p", strconv.Itoa(port))
	}
	if identity != "" {
		argv = append(argv, "-i", identity)
	}
	return append(argv, host)
}

// UnreachableError lists the hosts ssh could not reach, with ssh's last
// output for each.
type UnreachableError struct {
	Hosts  []string
	Output map[string]string
}

// Error implements the error interface.
func (e *UnreachableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "could not connect to %d host(s) via ssh: %s", len(e.Hosts), strings.Join(e.Hosts, ", "))
	for _, h := range e.Hosts {
		if out := strings.TrimSpace(e.Output[h]); out != "" {
			fmt.Fprintf(&b, "\n  %s: %s", h, strings.ReplaceAll(out, "\n", "\n    "))
		}
	}
	b.WriteString("\ncheck that passwordless ssh works (ssh HOST true), or fix -p/--ssh-port and -i/--ssh-identity-file")
	return b.String()
}

// Check probes every host in parallel and returns an *UnreachableError
// naming those that failed every attempt (or nil). It stops retrying when
// ctx ends.
func (c SSHCheck) Check(ctx context.Context, hosts []string) error {
	attempts, retry, run := c.Attempts, c.Retry, c.Run
	if attempts <= 0 {
		attempts = 5
	}
	if retry <= 0 {
		retry = time.Second
	}
	if run == nil {
		run = ExecRunner
	}
	var mu sync.Mutex
	failed := map[string]string{}
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last string
			for a := 0; a < attempts; a++ {
				out, err := run(ctx, c.Command(h))
				if err == nil {
					return
				}
				last = fmt.Sprintf("%v: %s", err, out)
				if ctx.Err() != nil {
					last = fmt.Sprintf("timed out (%v); last: %s", ctx.Err(), last)
					break
				}
				if a+1 < attempts {
					t := time.NewTimer(retry)
					select {
					case <-ctx.Done():
					case <-t.C:
					}
					t.Stop()
				}
			}
			mu.Lock()
			failed[h] = last
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(failed) == 0 {
		return nil
	}
	e := &UnreachableError{Output: failed}
	for h := range failed {
		e.Hosts = append(e.Hosts, h)
	}
	sort.Strings(e.Hosts)
	return e
}

// Locality decides which host names mean this machine.
type Locality struct {
	Hostname   string                     // os.Hostname()
	LocalAddrs []net.IP                   // this machine's interface addresses
	Resolve    func(host string) []net.IP // name resolution; nil: names are not resolved
	cache      map[string]bool
}

// NewLocality gathers this machine's names and addresses.
func NewLocality() *Locality {
	l := &Locality{}
	l.Hostname, _ = os.Hostname()
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				l.LocalAddrs = append(l.LocalAddrs, n.IP)
			}
		}
	}
	l.Resolve = func(host string) []net.IP {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ips, _ := net.DefaultResolver.LookupIP(ctx, "ip", host)
		return ips
	}
	return l
}

// IsLocal reports whether host names this machine: localhost, a loopback
// address, this machine's host name (full or short), or a name that
// resolves to one of its interface addresses.
func (l *Locality) IsLocal(host string) bool {
	if v, ok := l.cache[host]; ok {
		return v
	}
	v := l.isLocal(host)
	if l.cache == nil {
		l.cache = map[string]bool{}
	}
	l.cache[host] = v
	return v
}

func (l *Locality) isLocal(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if l.Hostname != "" {
		short, _, _ := strings.Cut(l.Hostname, ".")
		if host == l.Hostname || host == short {
			return true
		}
	}
	ips := []net.IP{net.ParseIP(host)}
	if ips[0] == nil {
		if l.Resolve == nil {
			return false
		}
		ips = l.Resolve(host)
	}
	for _, ip := range ips {
		if ip.IsLoopback() {
			return true
		}
		for _, a := range l.LocalAddrs {
			if a.Equal(ip) {
				return true
			}
		}
	}
	return false
}
