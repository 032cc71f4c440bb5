package emucluster

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Options describes a cluster to make.
type Options struct {
	// Nodes is the number of nodes, 1 to MaxNodes.
	Nodes int
	// Rate is each node link's rate in bits per second, in each direction;
	// zero leaves the links unshaped (as fast as the machine copies).
	Rate int64
	// Loss is the share of packets dropped in each direction of every
	// link, from 0 to MaxLoss (resolution 1/65536).
	Loss float64
	// Name prefixes every namespace and hostname of the cluster (letters,
	// digits and '-', at most 12 characters); "" picks "emu" and the
	// process id.
	Name string
}

// MaxNodes is the most nodes a cluster has (one /24 of addresses).
const MaxNodes = 200

// MaxLoss is the highest loss a link takes: beyond it TCP hardly moves.
const MaxLoss = 0.5

// Subnet is the addresses' network: node i is Subnet's host i+1.
const Subnet = "10.88.0.0/24"

// Node is one node of a cluster.
type Node struct {
	Index int
	// NS is its network namespace, Host its hostname (inside Command) and
	// Addr its IPv4 address.
	NS, Host, Addr string
}

// the devices on each end of a node's link: the node's own, inside its
// namespace, and the switch's port.
const nodeDev = "eth0"

func portDev(i int) string { return "p" + strconv.Itoa(i) }

// switchNS is the namespace that holds the bridge.
func switchNS(name string) string { return name + "-sw" }

// bridge is the switch's bridge device.
const bridge = "br0"

// The htb classes of every link end: what passes, and what is dropped.
const (
	passClassID = "1:10"
	dropClass   = "1:20"
)

// Filter priorities: silence first, then loss.
const (
	silencePrio = "1"
	lossPrio    = "2"
)

// unshapedRate is the htb rate of a link whose Options.Rate is zero:
// faster than any veth pair on the machines this runs on.
const unshapedRate = 400_000_000_000

// validate checks o and fills in its defaults.
func (o Options) validate(pid int) (Options, error) {
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		return o, fmt.Errorf("emucluster: %d nodes: want 1 to %d", o.Nodes, MaxNodes)
	}
	if o.Rate < 0 {
		return o, fmt.Errorf("emucluster: negative rate %d", o.Rate)
	}
	if o.Rate > 0 && o.Rate < 100_000 {
		return o, fmt.Errorf("emucluster: rate %d bit/s is below 100 kbit/s", o.Rate)
	}
	if err := checkLoss(o.Loss); err != nil {
		return o, err
	}
	if o.Name == "" {
		o.Name = fmt.Sprintf("emu%d", pid)
	}
	if len(o.Name) > 12 {
		return o, fmt.Errorf("emucluster: name %q is longer than 12 characters", o.Name)
	}
	for _, c := range o.Name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return o, fmt.Errorf("emucluster: name %q: only letters, digits and '-'", o.Name)
		}
	}
	return o, nil
}

func checkLoss(p float64) error {
	if math.IsNaN(p) || p < 0 || p > MaxLoss {
		return fmt.Errorf("emucluster: loss %v: want 0 to %v", p, MaxLoss)
	}
	return nil
}

// nodes lists the nodes of a validated o.
func (o Options) nodes() []Node {
	out := make([]Node, o.Nodes)
	for i := range out {
		n := fmt.Sprintf("%s-%d", o.Name, i)
		out[i] = Node{Index: i, NS: n, Host: n, Addr: fmt.Sprintf("10.88.0.%d", i+1)}
	}
	return out
}

// Plan returns the commands (each an argv) that make the cluster o
// describes, in order, and the nodes it will have. It runs nothing.
func Plan(o Options) ([][]string, []Node, error) {
	if o.Name == "" {
		return nil, nil, errors.New("emucluster: Plan needs a name")
	}
	o, err := o.validate(0)
	if err != nil {
		return nil, nil, err
	}
	nodes := o.nodes()
	sw := switchNS(o.Name)
	cmds := [][]string{
		{"ip", "netns", "add", sw},
		{"ip", "-n", sw, "link", "add", "name", bridge, "type", "bridge"},
		{"ip", "-n", sw, "link", "set", bridge, "up"},
	}
	for _, n := range nodes {
		port := portDev(n.Index)
		cmds = append(cmds,
			[]string{"ip", "netns", "add", n.NS},
			[]string{"ip", "-n", n.NS, "link", "set", "lo", "up"},
			[]string{"ip", "-n", sw, "link", "add", "name", port, "type", "veth", "peer", "name", nodeDev, "netns", n.NS},
			[]string{"ip", "-n", sw, "link", "set", port, "master", bridge},
			[]string{"ip", "-n", sw, "link", "set", port, "up"},
			[]string{"ip", "-n", n.NS, "addr", "add", n.Addr + "/24", "dev", nodeDev},
			[]string{"ip", "-n", n.NS, "link", "set", nodeDev, "up"},
		)
		for _, end := range [][2]string{{n.NS, nodeDev}, {sw, port}} {
			cmds = append(cmds, shape(end[0], end[1], o.Rate)...)
			cmds = append(cmds, lossCommands(end[0], end[1], o.Loss)...)
		}
	}
	return cmds, nodes, nil
}

// shape returns the commands that give the link end dev (in namespace ns)
// its htb: a pass class at rate (unshapedRate where zero) and a drop class
// whose qdisc is the blackhole.
func shape(ns, dev string, rate int64) [][]string {
	tc := func(args ...string) []string { return append([]string{"tc", "-n", ns}, args...) }
	return [][]string{
		tc("qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10"),
		passClass(ns, dev, "add", rate),
		tc(append([]string{"class", "add", "dev", dev, "parent", "1:", "classid", dropClass, "htb"}, rateArgs(rate)...)...),
		tc("qdisc", "add", "dev", dev, "parent", dropClass, "handle", "20:", "blackhole"),
	}
}

// passClass adds (verb "add") or changes (verb "change") dev's pass class.
func passClass(ns, dev, verb string, rate int64) []string {
	return append([]string{"tc", "-n", ns, "class", verb, "dev", dev, "parent", "1:", "classid", passClassID, "htb"},
		rateArgs(rate)...)
}

// rateArgs are an htb class's rate, ceiling, quantum and bursts for rate
// (unshapedRate where zero).
func rateArgs(rate int64) []string {
	if rate == 0 {
		rate = unshapedRate
	}
	r := strconv.FormatInt(rate, 10) + "bit"
	// htb's quantum (bytes a class sends per round) defaults to rate/10,
	// which it rejects above 200000; one class passes anyway.
	const quantum = "60000"
	// The burst: what the class may send at once when the timer is late,
	// one millisecond of the rate (at least 64 KiB) so that coarse timers
	// do not cap a fast link.
	burst := strconv.FormatInt(max(rate/8/1000, 64<<10), 10)
	return []string{"rate", r, "ceil", r, "quantum", quantum, "burst", burst, "cburst", burst}
}

// lossCommands returns the commands that drop the share p of the IPv4
// packets leaving dev; none where p is zero. Offload is cut to one segment
// per packet so that a drop is one packet on the wire.
func lossCommands(ns, dev string, p float64) [][]string {
	ms := LossMatches(p)
	if len(ms) == 0 {
		return nil
	}
	cmds := [][]string{{"ip", "-n", ns, "link", "set", "dev", dev, "gso_max_segs", "1"}}
	for _, m := range ms {
		cmds = append(cmds, []string{"tc", "-n", ns, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip",
			"prio", lossPrio, "u32", "match", "u16", fmt.Sprintf("0x%04x", m.Value), fmt.Sprintf("0x%04x", m.Mask),
			"at", "4", "flowid", dropClass})
	}
	return cmds
}

// unlossCommands removes the loss filters of dev.
func unlossCommands(ns, dev string) [][]string {
	return [][]string{{"tc", "-n", ns, "filter", "del", "dev", dev, "parent", "1:", "protocol", "ip", "prio", lossPrio}}
}

// silenceCommand drops every packet leaving dev, ahead of any other filter.
func silenceCommand(ns, dev string) []string {
	return []string{"tc", "-n", ns, "filter", "add", "dev", dev, "parent", "1:", "protocol", "all",
		"prio", silencePrio, "u32", "match", "u32", "0", "0", "flowid", dropClass}
}

// mendCommand removes what silenceCommand added.
func mendCommand(ns, dev string) []string {
	return []string{"tc", "-n", ns, "filter", "del", "dev", dev, "parent", "1:", "protocol", "all", "prio", silencePrio}
}

// Match is one u32 key on the IPv4 identification field (16 bits at
// offset 4): a packet whose id&Mask == Value is dropped.
type Match struct {
	Value, Mask uint16
}

// LossMatches returns disjoint keys on the low bits of the IPv4
// identification field that together take the share p of all 65536 ids
// (rounded to the nearest 1/65536), none where that rounds to zero. Keys
// on the low bits (not a range of ids) spread the drops evenly along a
// flow whose ids count up by one: the set taken is the ids whose
// bit-reversal is above 65535 - p·65536, cut into dyadic blocks, one key
// each. Id 0 is never taken: the kernel sends some packets, a listener's
// SYN-ACK among them, with id 0 every time, and a loss that took it would
// take them all.
func LossMatches(p float64) []Match {
	if checkLoss(p) != nil {
		return nil
	}
	t := uint32(math.Round(p * 65536))
	if t == 0 {
		return nil
	}
	v := 65535 - t // reversed ids above v are taken
	var out []Match
	// y > v exactly where, at the first bit (from the top) in which they
	// differ, y has 1 and v has 0: for each 0 bit k of v (k = 1..16), the
	// block of y that share v's top k-1 bits and have bit k set. In the id
	// itself those are its low k bits, reversed.
	for k := 1; k <= 16; k++ {
		if v&(1<<(16-k)) != 0 {
			continue
		}
		prefix := v>>(16-k) | 1 // v's top k bits, the k-th set
		id := bits.Reverse16(uint16(prefix << (16 - k)))
		out = append(out, Match{Value: id, Mask: uint16(1<<k - 1)})
	}
	return out
}

// ParseRate reads a rate in bits per second: a number with an optional
// unit kbit, mbit or gbit (powers of 1000), as tc writes rates: "1gbit",
// "2.5gbit", "100mbit", "0" (unshaped).
func ParseRate(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) {
		return 0, fmt.Errorf("emucluster: rate %q: want a number of bits per second, as 1gbit, 2.5gbit or 100mbit", s)
	}
	return int64(math.Round(v * mult)), nil
}

// FormatRate writes a rate as ParseRate reads it, in the largest unit that
// keeps it short.
func FormatRate(r int64) string {
	switch {
	case r == 0:
		return "unshaped"
	case r%1e9 == 0 || r >= 1e9 && r%1e8 == 0:
		return strconv.FormatFloat(float64(r)/1e9, 'f', -1, 64) + "gbit"
	case r%1e6 == 0 || r >= 1e6 && r%1e5 == 0:
		return strconv.FormatFloat(float64(r)/1e6, 'f', -1, 64) + "mbit"
	}
	return strconv.FormatInt(r, 10) + "bit"
}
