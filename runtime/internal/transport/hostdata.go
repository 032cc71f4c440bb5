package transport

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/embedded"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/steps"
	"github.com/gohorovod/gohorovod/tensor"
	"github.com/rs/zerolog"
)

// Host collectives under mpirun can travel over the embedded transport's
// TCP ring instead of MPI's own (Horovod's HOROVOD_CPU_OPERATIONS=gloo with
// the MPI controller): MPI starts, places and introduces the ranks, and
// keeps the per-cycle agreement's patient wait; tensors, and the rare
// negotiation of new names, go over TCP. The choice:
//
//   - HOROVOD_CPU_OPERATIONS=mpi: MPI carries everything.
//   - HOROVOD_CPU_OPERATIONS=gloo: the TCP ring, on one node too.
//   - unset, on one node: MPI (shared memory beats any socket).
//   - unset, across nodes: measured at Init. Both paths allreduce the
//     same tensor, interleaved; rank 0 keeps the faster by the medians
//     and the log says what it measured. Over TCP networks Open MPI's
//     TCP transport can fall well short of the link where the ring does
//     not; over a fast interconnect (InfiniBand, RoCE) MPI wins and the
//     ring is closed again.
const (
	hostDataMPI   = "mpi"   // MPI carries the tensors
	hostDataTCP   = "tcp"   // the embedded TCP ring carries them
	hostDataProbe = "probe" // measure both at Init and keep the faster
)

// probeBytes and probeRounds size the measurement: a tensor large enough
// that the link, not the latency, sets its time, allreduced probeRounds
// times on each path after one warm-up.
const (
	probeBytes  = 8 << 20
	probeRounds = 3
)

// hostDataMode decides how host tensors travel under MPI, from
// HOROVOD_CPU_OPERATIONS and the number of nodes the job spans.
func hostDataMode(cpuOps string, nodes int) string {
	switch {
	case cpuOps == config.ControllerGloo:
		return hostDataTCP
	case cpuOps == config.ControllerMPI || nodes < 2:
		return hostDataMPI
	}
	return hostDataProbe
}

// secretBytes is the length of the secret the ring's connections prove.
const secretBytes = 32

// IsHostData reports whether c is the pair OpenHostData returns when the
// ring carries the host collectives.
func IsHostData(c comm.Communicator) bool {
	_, ok := c.(hostDataComm)
	return ok
}

// hostAddrs is what one rank publishes so that the ranks can pick the
// address each listens on: its IPv4 interface addresses with their
// prefix lengths ("10.0.0.5/24").
type hostAddrs []string

// ownAddrs lists this host's IPv4 addresses that other hosts could reach:
// not loopback, not link-local.
func ownAddrs() hostAddrs {
	var out hostAddrs
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.To4() == nil || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
			continue
		}
		out = append(out, n.String())
	}
	return out
}

// pickListenIP chooses the address a rank listens on for the TCP ring:
// the first of its own addresses (CIDR form) whose network holds an
// address of every other node, so that each peer can reach it directly.
// others has one list per other node (the ranks of this rank's node are
// left out: they meet over Unix sockets). With no other node it is the
// loopback address.
func pickListenIP(own []string, others [][]string) (string, error) {
	if len(others) == 0 {
		return "127.0.0.1", nil
	}
	for _, a := range own {
		ip, n, err := net.ParseCIDR(a)
		if err != nil {
			continue
		}
		if !slices.ContainsFunc(others, func(addrs []string) bool { return !anyIn(n, addrs) }) {
			return ip.String(), nil
		}
	}
	return "", fmt.Errorf("no address of this host (%v) shares a network with every other node; "+
		"name the interface with %s or the address with %s", own, config.EnvGlooIface, config.EnvGlooAddr)
}

// anyIn reports whether one of addrs (CIDR form) lies in n.
func anyIn(n *net.IPNet, addrs []string) bool {
	return slices.ContainsFunc(addrs, func(a string) bool {
		ip, _, err := net.ParseCIDR(a)
		return err == nil && n.Contains(ip)
	})
}

// openTCPData opens the embedded transport's TCP ring beside MPI's world
// com: the ranks publish their addresses over com, each picks the one it
// listens on (pickListenIP, or GOHOROVOD_GLOO_ADDR / HOROVOD_GLOO_IFACE),
// rank 0 draws the secret every connection proves, and the ranks connect.
// nodes[r] is rank r's node (its lowest rank). Collective over com.
func openTCPData(com comm.Communicator, cfg config.Config, nodes []int) (*embedded.Comm, *embedded.Listeners, error) {
	rank := com.Rank()
	// A rank that fails keeps taking part in every collective below, so
	// that the others learn of it instead of waiting.
	ip, err := tcpListenIP(com, cfg, nodes)
	secret := tensor.New(tensor.Uint8, secretBytes)
	if rank == 0 {
		rand.Read(secret.Bytes())
	}
	if serr := com.Bcast(secret, 0); serr != nil {
		return nil, nil, fmt.Errorf("sharing the secret: %w", serr)
	}
	host := "node-" + strconv.Itoa(nodes[rank]) // MPI's grouping of the ranks by node
	var ls *embedded.Listeners
	if err == nil {
		ls, err = embedded.ListenPrivate(host, net.JoinHostPort(ip, "0"), cfg.GlooSocketDir)
	}
	var me []byte
	if err == nil {
		me, err = json.Marshal(ls.Peer())
	}
	// Every rank takes part in the gather, also one that could not
	// listen (it sends nothing), so that all learn of the failure.
	recs, gerr := steps.Gather(com, me)
	if gerr != nil {
		if ls != nil {
			ls.Close()
		}
		return nil, nil, fmt.Errorf("gathering the ranks' addresses: %w", gerr)
	}
	peers := make([]embedded.Peer, len(recs))
	for r, b := range recs {
		if err == nil && len(b) == 0 {
			err = fmt.Errorf("rank %d could not listen", r)
		}
		if err == nil {
			err = json.Unmarshal(b, &peers[r])
		}
	}
	if err != nil {
		if ls != nil {
			ls.Close()
		}
		return nil, nil, err
	}
	timeout := glooTimeout(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := newEmbedded(ctx, cfg, embedded.Config{Rank: rank, Peers: peers, Secret: secret.Bytes(), Listeners: ls, ConnectTimeout: timeout})
	if err != nil {
		ls.Close()
		return nil, nil, err
	}
	return c, ls, nil
}

// tcpListenIP is the address this rank's TCP ring listener takes: the
// configured one, else one every other node can reach (pickListenIP) from
// the addresses all ranks publish. Collective over com; a rank that finds
// none returns the reason.
func tcpListenIP(com comm.Communicator, cfg config.Config, nodes []int) (string, error) {
	own := ownAddrs()
	mine, err := json.Marshal(own)
	if err != nil {
		return "", err
	}
	recs, err := steps.Gather(com, mine)
	if err != nil {
		return "", fmt.Errorf("gathering the ranks' interface addresses: %w", err)
	}
	if cfg.GlooAddr != "" || cfg.GlooIface != "" {
		return rendezvous.ListenHost(cfg.GlooAddr, cfg.GlooIface, "")
	}
	var others [][]string
	seen := map[int]bool{nodes[com.Rank()]: true}
	for r, b := range recs {
		if seen[nodes[r]] {
			continue
		}
		seen[nodes[r]] = true
		var a hostAddrs
		if err := json.Unmarshal(b, &a); err != nil {
			return "", fmt.Errorf("rank %d's interface addresses: %w", r, err)
		}
		others = append(others, a)
	}
	return pickListenIP(own, others)
}

// hostDataComm runs a job's host collectives on data (the TCP ring) while
// ctrl (MPI's world) keeps the per-cycle agreement's patient wait and the
// node's doorbell. Both hold the same ranks in the same order; Split and
// SplitLocal split both, so that process sets and the hierarchical
// allreduce's groups keep the same arrangement.
type hostDataComm struct {
	comm.Communicator                   // data: the embedded transport
	ctrl              comm.Communicator // MPI
	ls                *embedded.Listeners
}

var (
	_ comm.PatientAllreducer = hostDataComm{}
	_ comm.Doorbeller        = hostDataComm{}
	_ comm.AgreementChecker  = hostDataComm{}
	_ comm.Aborter           = hostDataComm{}
)

// AllreducePatient runs on MPI, whose waits sleep between tests.
func (h hostDataComm) AllreducePatient(buf *tensor.Tensor, op tensor.ReduceOp, maxSleep time.Duration) error {
	if p, ok := h.ctrl.(comm.PatientAllreducer); ok {
		return p.AllreducePatient(buf, op, maxSleep)
	}
	return h.ctrl.Allreduce(buf, op)
}

// EnableDoorbell gives MPI's patient waits the node's doorbell.
func (h hostDataComm) EnableDoorbell() error {
	if d, ok := h.ctrl.(comm.Doorbeller); ok {
		return d.EnableDoorbell()
	}
	return fmt.Errorf("the MPI communicator has no doorbell")
}

// SetCheck turns the ring's agreement check on or off.
func (h hostDataComm) SetCheck(on bool) {
	if a, ok := h.Communicator.(comm.AgreementChecker); ok {
		a.SetCheck(on)
	}
}

// Check reports whether the ring's agreement check is on.
func (h hostDataComm) Check() bool {
	a, ok := h.Communicator.(comm.AgreementChecker)
	return ok && a.Check()
}

// Abort tears the ring's group down with cause, so that its peers fail
// at once instead of waiting on a socket.
func (h hostDataComm) Abort(cause error) error {
	if a, ok := h.Communicator.(comm.Aborter); ok {
		return a.Abort(cause)
	}
	return h.Communicator.Close()
}

// Split splits both communicators with the same color and key.
func (h hostDataComm) Split(color, key int) (comm.Communicator, error) {
	return h.both(func(c comm.Communicator) (comm.Communicator, error) { return c.Split(color, key) })
}

// SplitLocal splits both communicators by node.
func (h hostDataComm) SplitLocal() (comm.Communicator, error) {
	return h.both(comm.Communicator.SplitLocal)
}

// both applies split to MPI and then to the ring, and pairs the halves;
// a rank that gets no group (a negative color) gets the error from both.
func (h hostDataComm) both(split func(comm.Communicator) (comm.Communicator, error)) (comm.Communicator, error) {
	ctrl, cerr := split(h.ctrl)
	data, derr := split(h.Communicator)
	if cerr != nil || derr != nil {
		for _, c := range []comm.Communicator{ctrl, data} {
			if c != nil {
				c.Close()
			}
		}
		if cerr != nil {
			return nil, cerr
		}
		return nil, derr
	}
	return hostDataComm{Communicator: data, ctrl: ctrl}, nil
}

// Close closes the ring, its listeners and the MPI communicator.
func (h hostDataComm) Close() error {
	err := h.Communicator.Close()
	if h.ls != nil {
		if e := h.ls.Close(); err == nil {
			err = e
		}
	}
	if e := h.ctrl.Close(); err == nil {
		err = e
	}
	return err
}

// probeHostData times probeRounds allreduces of probeBytes on MPI and on
// the ring, interleaved after one warm-up each, and returns each path's
// median on rank 0 (the others return zeros). Collective on both.
func probeHostData(mpiC, tcpC comm.Communicator) (mpiT, tcpT time.Duration, err error) {
	buf := tensor.New(tensor.Float32, probeBytes/4)
	var ts [2][]time.Duration
	for i := 0; i <= probeRounds; i++ {
		for p, c := range []comm.Communicator{mpiC, tcpC} {
			if err := mpiC.Barrier(); err != nil {
				return 0, 0, err
			}
			start := time.Now()
			if err := c.Allreduce(buf, tensor.Sum); err != nil {
				return 0, 0, err
			}
			if i > 0 {
				ts[p] = append(ts[p], time.Since(start))
			}
		}
	}
	if mpiC.Rank() != 0 {
		return 0, 0, nil
	}
	return median(ts[0]), median(ts[1]), nil
}

// median returns the middle of ds (which it sorts).
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// OpenHostData moves the host collectives of a job over MPI (com, MPI's
// world; nodes[r] is rank r's node, its lowest rank) onto the TCP ring
// where hostDataMode says so (or, measured, where the ring is faster) and
// returns the communicator to run over, and whether it is the ring: com
// itself when MPI keeps them.
// With HOROVOD_CPU_OPERATIONS=gloo a ring that cannot open fails Init;
// when it was only to be measured, the job stays on MPI and rank 0 says
// why. Collective over com.
func OpenHostData(com comm.Communicator, cfg config.Config, nodes []int, log zerolog.Logger) (comm.Communicator, bool, error) {
	mode := hostDataMode(cfg.CPUOperations, len(slices.Compact(slices.Sorted(slices.Values(nodes)))))
	if mode == hostDataMPI || com.Size() < 2 {
		return com, false, nil
	}
	data, ls, err := openTCPData(com, cfg, nodes)
	if err = allOpened(com, err); err != nil {
		if data != nil {
			data.Close()
			ls.Close()
		}
		if mode == hostDataTCP {
			return nil, false, fmt.Errorf("%s=%s: opening the TCP ring: %w", config.EnvCPUOperations, cfg.CPUOperations, err)
		}
		if com.Rank() == 0 {
			log.Warn().Err(err).Msg("host collectives stay on MPI: the TCP ring could not open")
		}
		return com, false, nil
	}
	h := hostDataComm{Communicator: data, ctrl: com, ls: ls}
	if mode == hostDataTCP {
		if com.Rank() == 0 {
			log.Info().Msg("host collectives travel over the TCP ring (" + config.EnvCPUOperations + "=gloo)")
		}
		return h, true, nil
	}
	keep, err := measureHostData(com, data, log)
	if err != nil {
		data.Close()
		ls.Close()
		return nil, false, fmt.Errorf("measuring the TCP ring against MPI: %w", err)
	}
	if !keep {
		data.Close()
		ls.Close()
		return com, false, nil
	}
	return h, true, nil
}

// measureHostData runs probeHostData and has rank 0 decide for everyone
// (a broadcast over MPI): true keeps the ring.
func measureHostData(com comm.Communicator, data comm.Communicator, log zerolog.Logger) (bool, error) {
	mpiT, tcpT, err := probeHostData(com, data)
	if err != nil {
		return false, err
	}
	verdict := tensor.New(tensor.Int64, 1)
	if com.Rank() == 0 && tcpT < mpiT {
		verdict.Int64s()[0] = 1
	}
	if err := com.Bcast(verdict, 0); err != nil {
		return false, err
	}
	keep := verdict.Int64s()[0] == 1
	if com.Rank() == 0 {
		path := "MPI"
		if keep {
			path = "the TCP ring"
		}
		log.Info().Dur("mpi", mpiT).Dur("tcp_ring", tcpT).Int("bytes", probeBytes).
			Msg("the job spans nodes: host collectives travel over " + path + ", the faster of the two measured (" +
				config.EnvCPUOperations + "=mpi or gloo chooses)")
	}
	return keep, nil
}

// allOpened tells every rank whether every rank opened its ring (an
// allreduce over MPI of each rank's failure): mine when this rank failed,
// an error naming the first rank that did otherwise, nil when all did.
func allOpened(com comm.Communicator, mine error) error {
	failed := tensor.New(tensor.Int64, com.Size())
	if mine != nil {
		failed.Int64s()[com.Rank()] = 1
	}
	if err := com.Allreduce(failed, tensor.Max); err != nil {
		return err
	}
	if mine != nil {
		return mine
	}
	if r := slices.Index(failed.Int64s(), 1); r >= 0 {
		return fmt.Errorf("rank %d could not open it", r)
	}
	return nil
}
