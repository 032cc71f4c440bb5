package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/runtime/comm/embedded"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// embeddedComm is the embedded transport's communicator with the listeners
// Open opened for it, and, in an elastic job, the rendezvous session of its
// round: Close closes them all.
type embeddedComm struct {
	*embedded.Comm
	ls      *embedded.Listeners
	session *rendezvous.Session // elastic jobs only
	host    io.Closer           // the rendezvous this rank hosts (openPlaced), or nil
}

// Close closes the communicator, then this rank's listeners and session.
func (c embeddedComm) Close() error {
	err := errors.Join(c.Comm.Close(), c.ls.Close())
	if c.session != nil {
		err = errors.Join(err, c.session.Close())
	}
	if c.host != nil {
		err = errors.Join(err, c.host.Close())
	}
	return err
}

// meetFunc is how a worker of a fixed job meets its peers when it is not
// through the rendezvous server at cfg.RendezvousAddress (openPlaced's
// TCPStore): it publishes me and returns the assignment with every
// member.
type meetFunc func(ctx context.Context, me rendezvous.Member) (rendezvous.Assignment, error)

// openEmbedded starts this worker on the embedded transport:
// it listens (TCP on the address the other hosts reach, a Unix socket for
// the ranks of its own host), joins the job's rendezvous with its host and
// local rank (HOROVOD_HOSTNAME, HOROVOD_LOCAL_RANK), learns its rank and
// its peers' addresses, and connects to every peer, proving the job's
// secret (GOHOROVOD_SECRET) on every connection. HOROVOD_GLOO_TIMEOUT_SECONDS
// bounds the rendezvous and the connections; the error then names who did
// not arrive. A fixed job's worker meets its peers through meet when it is
// not nil (openPlaced's TCPStore); hosted, when not nil, is the rendezvous
// this rank serves, which the communicator's Close closes.
//
// In an elastic job (HOROVOD_ELASTIC=1) the rendezvous gives the placement
// (the environment has none), last is the round this worker was last a
// member of (0 at the first Init), and the join waits as long as the
// launcher takes to form the next round: the launcher bounds that with its
// elastic timeout, and ends the connection when it gives up. A worker the
// new round has no place for gets an error wrapping
// rendezvous.ErrRemoved.
func openEmbedded(cfg config.Config, last int, meet meetFunc, hosted io.Closer) (Place, error) {
	secret, err := cfg.Secret.Bytes()
	if err != nil {
		return Place{}, fmt.Errorf("embedded transport: %w", err)
	}
	server := cfg.RendezvousAddress()
	if server == "" {
		return Place{}, fmt.Errorf("embedded transport: no rendezvous server: set %s and %s (gohorovodrun --gloo does)",
			config.EnvRendezvousAddr, config.EnvRendezvousPort)
	}
	ls, me, err := listenEmbedded(cfg, server)
	if err != nil {
		return Place{}, err
	}
	a, session, err := joinEmbedded(cfg, server, secret, me, last, meet)
	if err != nil {
		ls.Close()
		return Place{}, err
	}
	c, err := connectEmbedded(cfg, a, secret, ls)
	if err != nil {
		ls.Close()
		if session != nil {
			session.Close()
		}
		return Place{}, err
	}
	p := Place{Comm: embeddedComm{Comm: c, ls: ls, session: session, host: hosted}, Name: Embedded, Round: a.Round, session: session}
	if session != nil {
		p.slots = make([]rendezvous.Slot, len(a.Members))
		for r, m := range a.Members {
			p.slots[r] = m.Slot
		}
	}
	return p, nil
}

// listenEmbedded opens this worker's listeners on the address the
// rendezvous server's hosts reach, and returns them with the member this
// worker joins the rendezvous as.
func listenEmbedded(cfg config.Config, server string) (*embedded.Listeners, rendezvous.Member, error) {
	host := cfg.Hostname
	if host == "" {
		var err error
		if host, err = os.Hostname(); err != nil {
			return nil, rendezvous.Member{}, fmt.Errorf("embedded transport: %s is not set and the host name is unknown: %w", config.EnvHostname, err)
		}
	}
	if cfg.LocalRank < 0 {
		return nil, rendezvous.Member{}, fmt.Errorf("embedded transport: %s is not set: the rendezvous needs each worker's host and local rank", config.EnvLocalRank)
	}
	ip, err := rendezvous.ListenHost(cfg.GlooAddr, cfg.GlooIface, server)
	if err != nil {
		return nil, rendezvous.Member{}, fmt.Errorf("embedded transport: %w", err)
	}
	ls, err := embedded.ListenPrivate(host, net.JoinHostPort(ip, "0"), cfg.GlooSocketDir)
	if err != nil {
		return nil, rendezvous.Member{}, err
	}
	data, err := json.Marshal(ls.Peer())
	if err != nil {
		ls.Close()
		return nil, rendezvous.Member{}, err
	}
	return ls, rendezvous.Member{Slot: rendezvous.Slot{Host: host, LocalRank: cfg.LocalRank}, Data: string(data)}, nil
}

// glooTimeout is HOROVOD_GLOO_TIMEOUT_SECONDS, or its default.
func glooTimeout(cfg config.Config) time.Duration {
	if cfg.GlooTimeout <= 0 {
		return config.DefaultGlooTimeout
	}
	return cfg.GlooTimeout
}

// joinEmbedded meets the job's other workers as me: through the
// rendezvous server's next round in an elastic job (the session stays
// open), else through meet or the server, checking the assignment against
// the placement the environment gives.
func joinEmbedded(cfg config.Config, server string, secret []byte, me rendezvous.Member, last int, meet meetFunc) (rendezvous.Assignment, *rendezvous.Session, error) {
	if cfg.Elastic {
		a, session, err := rendezvous.JoinRound(context.Background(), server, secret, me, last)
		if err != nil {
			return a, nil, fmt.Errorf("embedded transport: %w", err)
		}
		return a, session, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), glooTimeout(cfg))
	defer cancel()
	var (
		a   rendezvous.Assignment
		err error
	)
	if meet != nil {
		a, err = meet(ctx, me)
	} else {
		a, err = rendezvous.Join(ctx, server, secret, me)
	}
	if err != nil {
		return a, nil, fmt.Errorf("embedded transport: %w", err)
	}
	if err := a.Check(cfg.Rank, cfg.Size, cfg.LocalRank, cfg.LocalSize, cfg.CrossRank, cfg.CrossSize); err != nil {
		return a, nil, fmt.Errorf("embedded transport: %w", err)
	}
	return a, nil, nil
}

// connectEmbedded connects this worker to every member of a, whose
// addresses the members published at the rendezvous.
func connectEmbedded(cfg config.Config, a rendezvous.Assignment, secret []byte, ls *embedded.Listeners) (*embedded.Comm, error) {
	timeout := glooTimeout(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	peers := make([]embedded.Peer, len(a.Members))
	for r, m := range a.Members {
		if err := json.Unmarshal([]byte(m.Data), &peers[r]); err != nil {
			return nil, fmt.Errorf("embedded transport: rank %d's addresses (host %s local rank %d): %w", r, m.Host, m.LocalRank, err)
		}
	}
	c, err := newEmbedded(ctx, cfg, embedded.Config{Rank: a.Rank, Peers: peers, Secret: secret, Listeners: ls, ConnectTimeout: timeout})
	if err != nil {
		return nil, fmt.Errorf("embedded transport: %w", err)
	}
	return c, nil
}

// newEmbedded connects this rank to the group that ecfg describes
// (embedded.New) and forces the algorithms cfg names
// (GOHOROVOD_EMBEDDED_ALLGATHER, GOHOROVOD_EMBEDDED_ALLREDUCE).
func newEmbedded(ctx context.Context, cfg config.Config, ecfg embedded.Config) (*embedded.Comm, error) {
	c, err := embedded.New(ctx, ecfg)
	if err != nil {
		return nil, err
	}
	algo := embedded.Algorithms{
		Allgather: embedded.Algorithm(cfg.EmbeddedAllgather),
		Allreduce: embedded.Algorithm(cfg.EmbeddedAllreduce),
	}
	if err := c.SetAlgorithms(algo); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
