package launch

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/secret"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// The variables a multi-node launch reads for its defaults: torchrun's
// (as the Kubeflow training operator's PyTorchJob and Trainer's TrainJob
// set them for each pod), then MASTER_ADDR and MASTER_PORT (PyTorchJob,
// Volcano) where the PET_ ones are not set. Flags win over all of them.
const (
	EnvPetNNodes       = "PET_NNODES"
	EnvPetNodeRank     = "PET_NODE_RANK"
	EnvPetNProcPerNode = "PET_NPROC_PER_NODE"
	EnvPetMasterAddr   = "PET_MASTER_ADDR"
	EnvPetMasterPort   = "PET_MASTER_PORT"
	EnvMasterAddr      = "MASTER_ADDR"
	EnvMasterPort      = "MASTER_PORT"
)

// DefaultMasterPort is torchrun's default --master-port.
const DefaultMasterPort = 29500

// DefaultNodesTimeout is how long the launchers of a multi-node job wait
// for each other (node 0 for the others to arrive, the others for node 0
// to answer) when --start-timeout and HOROVOD_START_TIMEOUT do not say:
// nodes of a cluster job may start minutes apart.
const DefaultNodesTimeout = 5 * time.Minute

// Nodes is this launcher's part in a multi-node job started without ssh,
// torchrun's way: N launchers, one per node, each starting PerNode workers
// on its own node; the one of node rank 0 hosts the meeting of the
// launchers and the workers' rendezvous at MasterAddr:MasterPort.
type Nodes struct {
	N, Rank, PerNode int
	// Min is the fewest nodes of an elastic job (--nnodes MIN:MAX, then N
	// is MAX); Min equal to N: not elastic.
	Min        int
	MasterAddr string
	MasterPort int
	// Insecure is --insecure-secret: without GOHOROVOD_SECRET, the
	// secret is derived from MasterAddr and MasterPort.
	Insecure bool
	// LinkSilence is how long a launcher's connection to another may go
	// unanswered (nothing acknowledged, not even keep-alive probes) before
	// that node counts as gone (LinkSilence; zero: the kernel's own, many
	// minutes).
	LinkSilence time.Duration
}

// LinkSilence is how long the launchers' connections wait for a silent
// node, given the workers' heartbeat timeout hb: longer than hb, so that a
// link that flaps for less than the heartbeats tolerate kills nothing, and
// at least 10 s; plus 5 s, so that the workers' heartbeats name the silent
// node first. Heartbeats off (hb 0): 60 s.
func LinkSilence(hb time.Duration) time.Duration {
	if hb <= 0 {
		return 60 * time.Second
	}
	return max(hb, 10*time.Second) + 5*time.Second
}

// Master is "host:port" of the meeting.
func (n Nodes) Master() string {
	return joinHostPort(n.MasterAddr, n.MasterPort)
}

func joinHostPort(h string, p int) string {
	if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
		return "[" + h + "]:" + strconv.Itoa(p)
	}
	return h + ":" + strconv.Itoa(p)
}

// NodesFrom decides whether o asks for a multi-node launch and where this
// node stands in it: --nnodes, else $PET_NNODES when neither -np, -H,
// --hostfile nor an elastic flag was given. The other values come from
// their flags, else PET_NODE_RANK, PET_NPROC_PER_NODE ("auto" and "cpu":
// cpus), PET_MASTER_ADDR (else MASTER_ADDR) and PET_MASTER_PORT (else
// MASTER_PORT), else torchrun's defaults (node rank 0, one worker,
// 127.0.0.1 for a single node, port 29500). ok is false for an ordinary
// launch; then none of the node flags may be given. It reads nothing but
// o and lookup.
func NodesFrom(o *Options, lookup func(string) (string, bool), cpus int) (n Nodes, ok bool, err error) {
	env := func(name string) (string, bool) {
		v, ok := lookup(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	raw, src, ok, err := nnodesFrom(o, env)
	if !ok || err != nil {
		return Nodes{}, false, err
	}
	if n.Min, n.N, err = parseNNodes(raw, src); err != nil {
		return Nodes{}, false, err
	}
	n.Insecure = o.InsecureSecret
	if n.Rank, err = nodeRankFrom(o, env, n.N); err != nil {
		return Nodes{}, false, err
	}
	if n.PerNode, err = perNodeFrom(o, env, cpus); err != nil {
		return Nodes{}, false, err
	}
	if n.MasterAddr, n.MasterPort, err = masterFrom(o, env, n.N); err != nil {
		return Nodes{}, false, err
	}
	return n, true, nil
}

// nnodesFrom finds --nnodes (or PET_NNODES) and its source; ok is false
// for a job that is not multi-node, err for node flags that do not fit.
func nnodesFrom(o *Options, env func(string) (string, bool)) (raw, src string, ok bool, err error) {
	nodeFlags := []string{"node-rank", "nproc-per-node", "master-addr", "master-port", "insecure-secret"}
	raw, src = o.NNodes, "--nnodes"
	if !o.IsSet("nnodes") {
		other := o.IsSet("num-proc") || o.Hosts != "" || o.Hostfile != "" || o.Elastic()
		if v, has := env(EnvPetNNodes); has && !other {
			raw, src = v, EnvPetNNodes
		}
	}
	if raw == "" && !o.IsSet("nnodes") {
		for _, f := range nodeFlags {
			if o.IsSet(f) {
				return "", "", false, usagef("--%s needs --nnodes (or %s): gohorovodrun --nnodes 2 --node-rank 0 --nproc-per-node 4 --master-addr HOST ./train", f, EnvPetNNodes)
			}
		}
		return "", "", false, nil
	}
	if o.IsSet("nnodes") {
		for _, f := range []string{"num-proc", "hosts", "hostfile"} {
			if o.IsSet(f) {
				return "", "", false, usagef("--nnodes and --%s both given: with --nnodes each node's launcher starts --nproc-per-node workers on its own node", f)
			}
		}
		if o.Elastic() {
			return "", "", false, usagef("--nnodes does not take horovodrun's elastic flags (--min-np, --max-np, --host-discovery-script)")
		}
	}
	return raw, src, true, nil
}

// nodeRankFrom is this node's rank in a job of nnodes nodes:
// --node-rank, PET_NODE_RANK, or 0.
func nodeRankFrom(o *Options, env func(string) (string, bool), nnodes int) (rank int, err error) {
	var src string
	switch {
	case o.IsSet("node-rank"):
		rank, src = o.NodeRank, "--node-rank"
	default:
		rank, src = 0, "the default"
		if v, has := env(EnvPetNodeRank); has {
			if rank, err = strconv.Atoi(v); err != nil {
				return 0, usagef("%s=%q is not a node rank (a number from 0 to %d)", EnvPetNodeRank, v, nnodes-1)
			}
			src = EnvPetNodeRank
		}
	}
	if rank < 0 || rank >= nnodes {
		return 0, usagef("node rank %d (%s) is out of range: a job of %d nodes has node ranks 0 to %d", rank, src, nnodes, nnodes-1)
	}
	return rank, nil
}

// perNodeFrom is the number of workers per node: --nproc-per-node,
// PET_NPROC_PER_NODE, or 1.
func perNodeFrom(o *Options, env func(string) (string, bool), cpus int) (perNode int, err error) {
	var src string
	switch {
	case o.IsSet("nproc-per-node"):
		perNode, src = o.NProcPerNode, "--nproc-per-node"
	default:
		perNode, src = 1, "the default"
		if v, has := env(EnvPetNProcPerNode); has {
			src = EnvPetNProcPerNode
			switch v {
			case "auto", "cpu":
				perNode = cpus
			case "gpu":
				return 0, usagef("%s=gpu: give the number of workers per node (this launcher does not count GPUs)", EnvPetNProcPerNode)
			default:
				if perNode, err = strconv.Atoi(v); err != nil {
					return 0, usagef("%s=%q is not a number of workers per node", EnvPetNProcPerNode, v)
				}
			}
		}
	}
	if perNode < 1 {
		return 0, usagef("%d workers per node (%s): want at least 1", perNode, src)
	}
	return perNode, nil
}

// masterFrom is node 0's address and port: the flags, torchrun's
// variables, then MASTER_ADDR and MASTER_PORT.
func masterFrom(o *Options, env func(string) (string, bool), nnodes int) (addr string, port int, err error) {
	addr = strings.TrimSpace(o.MasterAddr)
	if addr == "" {
		if v, has := env(EnvPetMasterAddr); has {
			addr = v
		} else if v, has := env(EnvMasterAddr); has {
			addr = v
		}
	}
	if addr == "" {
		if nnodes > 1 {
			return "", 0, usagef("a job of %d nodes needs the address of node 0: give --master-addr (or set %s or %s)", nnodes, EnvPetMasterAddr, EnvMasterAddr)
		}
		addr = "127.0.0.1"
	}
	var src string
	switch {
	case o.IsSet("master-port"):
		port, src = o.MasterPort, "--master-port"
	default:
		port, src = DefaultMasterPort, "the default"
		for _, name := range []string{EnvPetMasterPort, EnvMasterPort} {
			if v, has := env(name); has {
				if port, err = strconv.Atoi(v); err != nil {
					return "", 0, usagef("%s=%q is not a port number", name, v)
				}
				src = name
				break
			}
		}
	}
	if port < 1 || port > 65535 {
		return "", 0, usagef("master port %d (%s) is not a port: want 1 to 65535", port, src)
	}
	return addr, port, nil
}

// parseNNodes reads --nnodes (or PET_NNODES, named by src): N, or
// torchrun's MIN:MAX (an elastic job when MIN < MAX).
func parseNNodes(v, src string) (lo, hi int, err error) {
	v = strings.TrimSpace(v)
	a, b, ranged := strings.Cut(v, ":")
	lo, errA := strconv.Atoi(strings.TrimSpace(a))
	hi = lo
	var errB error
	if ranged {
		hi, errB = strconv.Atoi(strings.TrimSpace(b))
	}
	if errA != nil || errB != nil {
		return 0, 0, usagef("%s=%q: want a number of nodes, e.g. --nnodes 2, or MIN:MAX for an elastic job", src, v)
	}
	if lo < 1 || hi < 1 {
		return 0, 0, usagef("%s=%q: a job has at least 1 node", src, v)
	}
	if lo > hi {
		return 0, 0, usagef("%s=%q: MIN is more than MAX", src, v)
	}
	return lo, hi, nil
}

// Elastic reports whether the job's nodes may come and go (MIN < MAX).
func (n Nodes) Elastic() bool { return n.Min < n.N }

// NodesSecret is the job secret of a multi-node job, hex-encoded: the
// launcher's GOHOROVOD_SECRET (every node must be given the same, e.g.
// from one Kubernetes Secret); for a single node without it, a fresh one;
// with --insecure-secret, one derived from the master's address and port.
// Without any of these a job of several nodes is refused: a secret that
// every launcher could compute from what they share (the master's address)
// could be computed by anyone who can reach the master.
func NodesSecret(n Nodes, lookup func(string) (string, bool)) (string, error) {
	if v, ok := lookup(config.EnvSecret); ok && strings.TrimSpace(v) != "" {
		v = strings.TrimSpace(v)
		if _, err := secret.Parse(v); err != nil {
			return "", usagef("%s: %v (set it to the same hex key on every node, e.g. `openssl rand -hex 32`)", config.EnvSecret, err)
		}
		return v, nil
	}
	switch {
	case n.Insecure:
		h := sha256.Sum256([]byte("gohorovod insecure node secret\x00" + n.Master()))
		return hex.EncodeToString(h[:]), nil
	case n.N == 1:
		return secret.New()
	}
	return "", usagef("a job of %d nodes needs its secret: set %s to the same hex key on every node "+
		"(e.g. `openssl rand -hex 32`, or a Kubernetes Secret), or give --insecure-secret to derive it from the master's address "+
		"(anyone who can reach the master can then join the job)", n.N, config.EnvSecret)
}

// NodeLabels names each node (by node rank) for the workers' placement
// (HOROVOD_HOSTNAME) and the messages: its host name, or where several
// nodes report the same name (containers, network namespaces) the name
// and "-node" and its rank, so that every node has its own.
func NodeLabels(hosts []string) []string {
	count := map[string]int{}
	for _, h := range hosts {
		count[h]++
	}
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = h
		if h == "" {
			out[i] = "node" + strconv.Itoa(i)
		} else if count[h] > 1 {
			out[i] = fmt.Sprintf("%s-node%d", h, i)
		}
	}
	return out
}

// NodeHosts is the job's hosts, node by node in node-rank order, each with
// perNode slots: Assign then gives the ranks horovodrun would (node 0's
// workers ranks 0 to perNode-1, and so on; local ranks contiguous).
func NodeHosts(labels []string, perNode int) []Host {
	hosts := make([]Host, len(labels))
	for i, l := range labels {
		hosts[i] = Host{Name: l, Slots: perNode}
	}
	return hosts
}

// NodeError reports a multi-node job that ended because of one node: its
// launcher or one of its workers failed, or it could no longer be reached.
type NodeError struct {
	NodeRank int
	Host     string // its label (NodeLabels), or "" where unknown
	Err      error
}

// Error implements the error interface, e.g. "node 1 (host h1) failed:
// rank 3 (on host h1) exited with status 1; the job was stopped on every
// node".
func (e *NodeError) Error() string {
	who := "node " + strconv.Itoa(e.NodeRank)
	if e.Host != "" {
		who += " (host " + e.Host + ")"
	}
	return who + " failed: " + e.Err.Error() + "; the job was stopped on every node"
}

// Unwrap returns Err.
func (e *NodeError) Unwrap() error { return e.Err }
