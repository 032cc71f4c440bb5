package transport

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/internal/job/origin"
	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/internal/job/tcpstore"
	"github.com/gohorovod/gohorovod/mpi"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// placedBy says whether Init should take this worker's placement from an
// engine other than gohorovodrun and MPI (internal/job/origin: srun,
// torchrun, PyTorchJob, Volcano), and returns it. An MPI launcher wins
// (mpirun's or a PMI's variables), and so do gohorovodrun's (the caller
// asks only when they are absent). Under srun an MPI-built binary goes to
// MPI unless HOROVOD_CONTROLLER=gloo asks for the embedded transport:
// mpi.CheckSrun then says what a bare srun lacks.
func placedBy(cfg config.Config, lookup func(string) (string, bool)) (origin.Placement, bool, error) {
	if mpi.StartedByMPI(getenv(lookup)) {
		return origin.Placement{}, false, nil
	}
	p, ok, err := origin.Detect(lookup)
	if !ok || err == nil && p.Size == 1 {
		// One process needs no meeting: it runs as one rank.
		return origin.Placement{}, false, nil
	}
	if p.Engine == origin.Srun && mpi.Built && cfg.Controller != config.ControllerGloo {
		return origin.Placement{}, false, nil
	}
	return p, true, err
}

// openPlaced starts a worker that p's engine placed on the embedded
// transport. Its rank and size are the engine's. Where torchrun's agent
// serves its TCPStore at p.Master the workers meet through it; elsewhere
// rank 0 hosts gohorovod's rendezvous at p.Master for the job and the
// others join it (retrying until HOROVOD_GLOO_TIMEOUT_SECONDS). The job's
// secret is GOHOROVOD_SECRET, else derived from the user's key file
// (origin.JobSecret).
func openPlaced(cfg config.Config, p origin.Placement, env Env) (Place, error) {
	cfg, secret, err := placedConfig(cfg, p, env.Lookup)
	if err != nil {
		return Place{}, err
	}
	var (
		meet   meetFunc
		hosted *rendezvous.Server
	)
	switch {
	case p.Store:
		meet = storeMeet(p)
	case p.Rank == 0:
		if hosted, err = hostRendezvous(p, secret, env.HostLog); err != nil {
			return Place{}, err
		}
	}
	var host io.Closer
	if hosted != nil {
		host = hosted
	}
	pl, err := openEmbedded(cfg, 0, meet, host)
	if err != nil {
		if hosted != nil {
			hosted.Close()
		}
		return Place{}, fmt.Errorf("%w (placed by %s as rank %d of %d, meeting at %s)", err, p.Engine, p.Rank, p.Size, p.Master)
	}
	return pl, nil
}

// placedConfig is cfg with the embedded transport's settings for a worker
// that p's engine placed: the meeting at p.Master, the engine's placement
// and the job's secret, which it also returns as bytes.
func placedConfig(cfg config.Config, p origin.Placement, lookup func(string) (string, bool)) (config.Config, []byte, error) {
	if cfg.Secret == "" {
		file, err := origin.KeyFile(lookup)
		if err != nil {
			return cfg, nil, fmt.Errorf("embedded transport under %s: %w", p.Engine, err)
		}
		key, err := origin.JobSecret(file, p.Job)
		if err != nil {
			return cfg, nil, fmt.Errorf("embedded transport under %s: %w", p.Engine, err)
		}
		cfg.Secret = config.Secret(hex.EncodeToString(key))
	}
	secret, err := cfg.Secret.Bytes()
	if err != nil {
		return cfg, nil, fmt.Errorf("embedded transport under %s: %s: %w", p.Engine, config.EnvSecret, err)
	}
	host, port, err := net.SplitHostPort(p.Master)
	if err != nil {
		return cfg, nil, err
	}
	cfg.Controller = config.ControllerGloo
	cfg.RendezvousAddr = host
	cfg.RendezvousPort, _ = strconv.Atoi(port)
	cfg.Rank, cfg.Size = p.Rank, p.Size
	cfg.LocalRank, cfg.LocalSize = p.Me().LocalRank, p.LocalSize()
	cfg.CrossRank, cfg.CrossSize = config.Unset, config.Unset
	cfg.Hostname = p.Me().Host
	cfg.Elastic = false
	return cfg, secret, nil
}

// hostRendezvous serves the job's rendezvous on every address of this
// host at p.Master's port, expecting p.Slots; what the server reports
// goes to log.
func hostRendezvous(p origin.Placement, secret []byte, log zerolog.Logger) (*rendezvous.Server, error) {
	_, port, _ := net.SplitHostPort(p.Master)
	srv, err := rendezvous.NewServer(secret, p.Slots)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", net.JoinHostPort("", port))
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("embedded transport under %s: rank 0 cannot host the rendezvous at %s: %w "+
			"(choose another port: %s under srun, MASTER_PORT under torch's variables)", p.Engine, p.Master, err, origin.EnvRendezvousPort)
	}
	srv.Logf = func(format string, args ...any) {
		log.Warn().Msgf("rendezvous: "+format, args...)
	}
	go srv.Serve(l)
	return srv, nil
}

// storeKey is the TCPStore key under which rank r of job publishes its
// addresses.
func storeKey(job string, r int) string { return "gohorovod/" + job + "/rank/" + strconv.Itoa(r) }

// storeMeet meets the peers through the TCPStore that torchrun's agent
// serves at p.Master: every worker sets its own key and waits for all the
// others. Placement comes from the engine (rendezvous.Assign of p.Slots).
func storeMeet(p origin.Placement) meetFunc {
	return func(ctx context.Context, me rendezvous.Member) (rendezvous.Assignment, error) {
		plan, err := rendezvous.Assign(p.Slots)
		if err != nil {
			return rendezvous.Assignment{}, err
		}
		st, err := tcpstore.Dial(ctx, p.Master)
		if err != nil {
			return rendezvous.Assignment{}, err
		}
		defer st.Close()
		if err := st.Set(storeKey(p.Job, p.Rank), []byte(me.Data)); err != nil {
			return rendezvous.Assignment{}, storeHint(p, st.Protocol(), err)
		}
		keys := make([]string, p.Size)
		for r := range keys {
			keys[r] = storeKey(p.Job, r)
		}
		if err := st.Wait(ctx, keys...); err != nil {
			if errors.Is(err, tcpstore.ErrTimeout) {
				return rendezvous.Assignment{}, missingInStore(p, keys, err)
			}
			return rendezvous.Assignment{}, storeHint(p, st.Protocol(), err)
		}
		a := plan[p.Rank]
		a.Members = make([]rendezvous.Member, p.Size)
		for r, k := range keys {
			v, err := st.Get(ctx, k)
			if err != nil {
				return rendezvous.Assignment{}, err
			}
			a.Members[r] = rendezvous.Member{Slot: p.Slots[r], Data: string(v)}
		}
		return a, nil
	}
}

// storeHint adds to an error of the store's connection what is the
// likely cause: a store whose protocol is neither of those the client
// probes for (torch 1.x's, torch 2's), which drops the connection.
func storeHint(p origin.Placement, proto string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("%w: torchrun's TCPStore at %s closed the connection (probed as %s's protocol); "+
			"if this torch's store speaks another, run torchrun with --rdzv_backend c10d (or --standalone), where gohorovod's rank 0 hosts the meeting",
			err, p.Master, proto)
	}
	return err
}

// missingInStore names the ranks whose keys the store lacks, asking it on
// a new connection (the waiting one was closed).
func missingInStore(p origin.Placement, keys []string, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), rendezvous.HandshakeTimeout)
	defer cancel()
	st, err := tcpstore.Dial(ctx, p.Master)
	if err != nil {
		return cause
	}
	defer st.Close()
	var missing []int
	for r, k := range keys {
		if ok, err := st.Check(k); err == nil && !ok {
			missing = append(missing, r)
		}
	}
	return fmt.Errorf("rendezvous through torch's TCPStore at %s: ranks %v never arrived: %w", p.Master, missing, cause)
}
