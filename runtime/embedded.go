package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/embedded"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// transportEmbedded names the embedded (pure Go) transport in the log.
const transportEmbedded = "embedded"

// embeddedComm is the embedded transport's communicator with the listeners
// Init opened for it, and, in an elastic job, the rendezvous session of its
// round: Close closes them all.
type embeddedComm struct {
	*embedded.Comm
	ls      *embedded.Listeners
	session *rendezvous.Session // elastic jobs only
	host    io.Closer           // the rendezvous this rank hosts (openPlaced), or nil
	round   int                 // the elastic round; 0 in a fixed job
	slots   []rendezvous.Slot   // slots[r] is rank r's (elastic jobs)
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

// openEmbedded starts this worker on the embedded transport:
// it listens (TCP on the address the other hosts reach, a Unix socket for
// the ranks of its own host), joins the job's rendezvous with its host and
// local rank (HOROVOD_HOSTNAME, HOROVOD_LOCAL_RANK), learns its rank and
// its peers' addresses, and connects to every peer, proving the job's
// secret (GOHOROVOD_SECRET) on every connection. HOROVOD_GLOO_TIMEOUT_SECONDS
// bounds the rendezvous and the connections; the error then names who did
// not arrive.
//
// In an elastic job (HOROVOD_ELASTIC=1) the rendezvous gives the placement
// (the environment has none), last is the round this worker was last a
// member of (0 at the first Init), and the join waits as long as the
// launcher takes to form the next round: the launcher bounds that with its
// elastic timeout, and ends the connection when it gives up. A worker the
// new round has no place for gets an error wrapping
// rendezvous.ErrRemoved.
func openEmbedded(cfg config.Config, last int) (comm.Communicator, error) {
	return openEmbeddedVia(cfg, last, nil)
}

// meetFunc is how a worker of a fixed job meets its peers when it is not
// through the rendezvous server at cfg.RendezvousAddress (openPlaced's
// TCPStore): it publishes me and returns the assignment with every
// member.
type meetFunc func(ctx context.Context, me rendezvous.Member) (rendezvous.Assignment, error)

// openEmbeddedVia is openEmbedded, meeting the peers through meet when it
// is not nil.
func openEmbeddedVia(cfg config.Config, last int, meet meetFunc) (comm.Communicator, error) {
	secret, err := cfg.Secret.Bytes()
	if err != nil {
		return nil, fmt.Errorf("embedded transport: %w", err)
	}
	server := cfg.RendezvousAddress()
	if server == "" {
		return nil, fmt.Errorf("embedded transport: no rendezvous server: set %s and %s (gohorovodrun --gloo does)",
			config.EnvRendezvousAddr, config.EnvRendezvousPort)
	}
	host := cfg.Hostname
	if host == "" {
		if host, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("embedded transport: %s is not set and the host name is unknown: %w", config.EnvHostname, err)
		}
	}
	if cfg.LocalRank < 0 {
		return nil, fmt.Errorf("embedded transport: %s is not set: the rendezvous needs each worker's host and local rank", config.EnvLocalRank)
	}
	ip, err := rendezvous.ListenHost(cfg.GlooAddr, cfg.GlooIface, server)
	if err != nil {
		return nil, fmt.Errorf("embedded transport: %w", err)
	}
	ls, err := embedded.ListenPrivate(host, net.JoinHostPort(ip, "0"), cfg.GlooSocketDir)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			ls.Close()
		}
	}()
	data, err := json.Marshal(ls.Peer())
	if err != nil {
		return nil, err
	}
	timeout := cfg.GlooTimeout
	if timeout <= 0 {
		timeout = config.DefaultGlooTimeout
	}
	me := rendezvous.Member{Slot: rendezvous.Slot{Host: host, LocalRank: cfg.LocalRank}, Data: string(data)}
	var (
		a       rendezvous.Assignment
		session *rendezvous.Session
	)
	if cfg.Elastic {
		a, session, err = rendezvous.JoinRound(context.Background(), server, secret, me, last)
		if err != nil {
			return nil, fmt.Errorf("embedded transport: %w", err)
		}
		defer func() {
			if !ok {
				session.Close()
			}
		}()
	} else {
		jctx, jcancel := context.WithTimeout(context.Background(), timeout)
		if meet != nil {
			a, err = meet(jctx, me)
		} else {
			a, err = rendezvous.Join(jctx, server, secret, me)
		}
		jcancel()
		if err != nil {
			return nil, fmt.Errorf("embedded transport: %w", err)
		}
		if err := a.Check(cfg.Rank, cfg.Size, cfg.LocalRank, cfg.LocalSize, cfg.CrossRank, cfg.CrossSize); err != nil {
			return nil, fmt.Errorf("embedded transport: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	peers := make([]embedded.Peer, len(a.Members))
	for r, m := range a.Members {
		if err := json.Unmarshal([]byte(m.Data), &peers[r]); err != nil {
			return nil, fmt.Errorf("embedded transport: rank %d's addresses (host %s local rank %d): %w", r, m.Host, m.LocalRank, err)
		}
	}
	c, err := embedded.New(ctx, embedded.Config{Rank: a.Rank, Peers: peers, Secret: secret, Listeners: ls, ConnectTimeout: timeout})
	if err != nil {
		return nil, fmt.Errorf("embedded transport: %w", err)
	}
	ok = true
	var slots []rendezvous.Slot
	if session != nil {
		slots = make([]rendezvous.Slot, len(a.Members))
		for r, m := range a.Members {
			slots[r] = m.Slot
		}
	}
	return embeddedComm{Comm: c, ls: ls, session: session, round: a.Round, slots: slots}, nil
}
