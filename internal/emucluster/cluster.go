package emucluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrUnsupported is wrapped by New's error where this machine cannot make
// a cluster at all: not root, no iproute2, or network namespaces refused.
var ErrUnsupported = errors.New("emucluster: this machine cannot make an emulated cluster")

// Cluster is an emulated cluster that New made; Close removes it.
type Cluster struct {
	opts  Options
	nodes []Node

	mu     sync.Mutex
	closed bool
}

// netnsEtc is where `ip netns exec` finds a namespace's own /etc files.
const netnsEtc = "/etc/netns"

// Check says whether this machine can make a cluster: nil, or an error
// wrapping ErrUnsupported with the reason.
func Check() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: network namespaces need root", ErrUnsupported)
	}
	for _, c := range []string{"ip", "tc", "unshare"} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("%w: no %s command (iproute2, util-linux)", ErrUnsupported, c)
		}
	}
	return nil
}

// New makes the cluster o describes and returns it; on error nothing of it
// is left. Every node can reach every other at its Addr, and by its Host
// name (each node's /etc/hosts lists them all).
func New(o Options) (*Cluster, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	o, err := o.validate(os.Getpid())
	if err != nil {
		return nil, err
	}
	cmds, nodes, err := Plan(o)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: o, nodes: nodes}
	// The first command makes the switch's namespace: its failure means
	// this machine refuses namespaces.
	if err := run(cmds[0]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	for _, cmd := range cmds[1:] {
		if err := run(cmd); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.writeHosts(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// writeHosts gives every node an /etc/hosts and /etc/hostname of its own.
func (c *Cluster) writeHosts() error {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n")
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "%s\t%s\n", n.Addr, n.Host)
	}
	for _, n := range c.nodes {
		dir := filepath.Join(netnsEtc, n.NS)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("emucluster: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("emucluster: %w", err)
		}
	}
	return nil
}

// Options returns the cluster's options, defaults filled in.
func (c *Cluster) Options() Options { return c.opts }

// Nodes returns the cluster's nodes in order.
func (c *Cluster) Nodes() []Node { return append([]Node(nil), c.nodes...) }

// Addrs returns the nodes' addresses in order.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr
	}
	return out
}

// Command returns the command that runs argv on node i: inside its
// network namespace, with its hostname (a UTS namespace of its own) and
// its /etc/hosts.
func (c *Cluster) Command(i int, argv ...string) *exec.Cmd {
	return exec.Command("ip", c.CommandArgv(i, argv...)[1:]...)
}

// CommandArgv is the argv of Command.
func (c *Cluster) CommandArgv(i int, argv ...string) []string {
	n := c.nodes[i]
	return NodeArgv(n.NS, n.Host, argv...)
}

// NodeArgv is the argv that runs argv in network namespace ns with
// hostname host.
func NodeArgv(ns, host string, argv ...string) []string {
	return append([]string{"ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c",
		`hostname "$0" && exec "$@"`, host}, argv...)
}

// Silence drops every packet to and from node i from now on, without a
// reset: its peers see a link that went quiet.
func (c *Cluster) Silence(i int) error {
	for _, e := range c.ends(i) {
		if err := run(silenceCommand(e[0], e[1])); err != nil {
			return err
		}
	}
	return nil
}

// Mend undoes Silence.
func (c *Cluster) Mend(i int) error {
	for _, e := range c.ends(i) {
		if err := run(mendCommand(e[0], e[1])); err != nil {
			return err
		}
	}
	return nil
}

// SetLoss makes node i's link drop the share p of its packets in each
// direction (0: none).
func (c *Cluster) SetLoss(i int, p float64) error {
	if err := checkLoss(p); err != nil {
		return err
	}
	for _, e := range c.ends(i) {
		// Removing filters that are not there fails: ignore it.
		for _, cmd := range unlossCommands(e[0], e[1]) {
			run(cmd)
		}
		for _, cmd := range lossCommands(e[0], e[1], p) {
			if err := run(cmd); err != nil {
				return err
			}
		}
	}
	return nil
}

// SetRate changes node i's link rate in each direction (0: unshaped).
func (c *Cluster) SetRate(i int, rate int64) error {
	if rate < 0 {
		return fmt.Errorf("emucluster: negative rate %d", rate)
	}
	for _, e := range c.ends(i) {
		if err := run(passClass(e[0], e[1], "change", rate)); err != nil {
			return err
		}
	}
	return nil
}

// ends are node i's link ends: {namespace, device} on the node and on the
// switch.
func (c *Cluster) ends(i int) [][2]string {
	return [][2]string{{c.nodes[i].NS, nodeDev}, {switchNS(c.opts.Name), portDev(i)}}
}

// Close kills whatever still runs in the cluster's namespaces, then
// removes them and their /etc files. It is safe to call twice.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return Remove(c.opts.Name, len(c.nodes))
}

// Remove removes the namespaces of the cluster called name with n nodes
// (as another process's Close would), killing what runs in them first;
// namespaces that are not there are skipped.
func Remove(name string, n int) error {
	var errs []error
	spaces := []string{switchNS(name)}
	for i := 0; i < n; i++ {
		spaces = append(spaces, fmt.Sprintf("%s-%d", name, i))
	}
	for _, ns := range spaces {
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); err != nil {
			continue
		}
		killAll(ns)
		if err := run([]string{"ip", "netns", "del", ns}); err != nil {
			errs = append(errs, err)
		}
		os.RemoveAll(filepath.Join(netnsEtc, ns))
	}
	return errors.Join(errs...)
}

// killAll kills every process in namespace ns and waits, briefly, for
// them to be gone.
func killAll(ns string) {
	for try := 0; try < 50; try++ {
		out, err := exec.Command("ip", "netns", "pids", ns).Output()
		if err != nil {
			return
		}
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			return
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid != os.Getpid() {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run runs one command, returning its output in the error.
func run(argv []string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("emucluster: %s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Open returns the cluster called name that another process made (with
// New, or `emucluster up`), found by its namespaces. Its Options hold
// only the name and the number of nodes.
func Open(name string) (*Cluster, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	o, err := Options{Nodes: 1, Name: name}.validate(0)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join("/run/netns", switchNS(name))); err != nil {
		return nil, fmt.Errorf("emucluster: no cluster %q on this machine (no namespace %s)", name, switchNS(name))
	}
	n := 0
	for ; n < MaxNodes; n++ {
		if _, err := os.Stat(filepath.Join("/run/netns", fmt.Sprintf("%s-%d", name, n))); err != nil {
			break
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("emucluster: cluster %q has no nodes", name)
	}
	o.Nodes = n
	return &Cluster{opts: o, nodes: o.nodes()}, nil
}

// NodeOf returns the index of the node that host names: its hostname, its
// address, or "localhost" (node 0).
func (c *Cluster) NodeOf(host string) (int, error) {
	if host == "localhost" || host == "127.0.0.1" {
		return 0, nil
	}
	for _, n := range c.nodes {
		if host == n.Host || host == n.Addr {
			return n.Index, nil
		}
	}
	return 0, fmt.Errorf("emucluster: %q is no node of cluster %s (nodes %s-0 to %s-%d, 10.88.0.1 to 10.88.0.%d)",
		host, c.opts.Name, c.opts.Name, c.opts.Name, len(c.nodes)-1, len(c.nodes))
}
