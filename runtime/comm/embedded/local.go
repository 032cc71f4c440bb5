package embedded

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gohorovod/gohorovod/runtime/comm"
)

// GroupOptions configures NewLocalGroup.
type GroupOptions struct {
	// Unix makes ranks with equal Hosts talk over Unix sockets (in a fresh
	// directory under os.TempDir, removed when the last rank closes); else
	// every connection is loopback TCP.
	Unix bool
	// Hosts gives each rank's host identity (len n); nil puts every rank on
	// host "local". SplitLocal groups ranks by it.
	Hosts []string
	// Secret is the job key; nil makes a random one.
	Secret []byte
	// ConnectTimeout bounds the mesh's set-up (default 10 s).
	ConnectTimeout time.Duration
	// Logf, when set, is every rank's Config.Logf.
	Logf func(format string, args ...any)
}

// NewLocalGroup returns the n members of a new group over the embedded
// transport, all in this process, each with its own listeners on
// 127.0.0.1 (and Unix sockets with o.Unix): the real transport, for tests.
// Each member is meant to be used by its own goroutine. Close every member;
// each closes its own listeners.
func NewLocalGroup(n int, o GroupOptions) ([]comm.Communicator, error) {
	if n < 1 {
		return nil, fmt.Errorf("embedded: NewLocalGroup of %d ranks", n)
	}
	if o.Hosts != nil && len(o.Hosts) != n {
		return nil, fmt.Errorf("embedded: NewLocalGroup: %d hosts for %d ranks", len(o.Hosts), n)
	}
	secret := o.Secret
	if secret == nil {
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return nil, err
		}
	}
	timeout := o.ConnectTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	dir := ""
	if o.Unix {
		d, err := os.MkdirTemp("", "ghv")
		if err != nil {
			return nil, fmt.Errorf("embedded: NewLocalGroup: %w", err)
		}
		dir = d
	}
	lns, err := listenLocal(n, o.Hosts, dir)
	if err != nil {
		return nil, err
	}
	out, err := connectLocal(lns, secret, timeout, o.Logf)
	if err != nil {
		closeLocal(lns, dir)
		return nil, err
	}
	ownLocal(out, lns, dir)
	return out, nil
}

// listenLocal opens the listeners of n ranks on hosts (nil: all "local"),
// with their Unix sockets in dir (none when empty); on an error it closes
// the ones it opened, and removes dir.
func listenLocal(n int, hosts []string, dir string) ([]*Listeners, error) {
	lns := make([]*Listeners, n)
	for r := range n {
		host := "local"
		if hosts != nil {
			host = hosts[r]
		}
		l, err := Listen(host, "127.0.0.1:0", dir)
		if err != nil {
			closeLocal(lns, dir)
			return nil, err
		}
		lns[r] = l
	}
	return lns, nil
}

// closeLocal closes the listeners that are open and removes dir.
func closeLocal(lns []*Listeners, dir string) {
	for _, l := range lns {
		if l != nil {
			l.Close()
		}
	}
	if dir != "" {
		os.RemoveAll(dir)
	}
}

// connectLocal makes every rank's member of the group, each over its own
// listeners, all at once (each waits for the others to connect); on an
// error it closes the members it made.
func connectLocal(lns []*Listeners, secret []byte, timeout time.Duration, logf func(string, ...any)) ([]comm.Communicator, error) {
	n := len(lns)
	peers := make([]Peer, n)
	for r, l := range lns {
		peers[r] = l.Peer()
	}
	out := make([]comm.Communicator, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			c, err := New(context.Background(), Config{Rank: r, Peers: peers, Secret: secret, Listeners: lns[r], ConnectTimeout: timeout, Logf: logf})
			if err != nil {
				errs[r] = err
				return
			}
			out[r] = c
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range out {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	return out, nil
}

// ownLocal makes each member close its own listeners when it is closed,
// and the last of them remove dir.
func ownLocal(out []comm.Communicator, lns []*Listeners, dir string) {
	var left atomic.Int32 // ranks not yet closed; the last removes dir
	left.Store(int32(len(out)))
	for r, c := range out {
		l := lns[r]
		var once sync.Once
		c.(*Comm).owner = &ownerRef{close: func() error {
			var err error
			once.Do(func() {
				err = l.Close()
				if left.Add(-1) == 0 && dir != "" {
					os.RemoveAll(dir)
				}
			})
			return err
		}}
	}
}
