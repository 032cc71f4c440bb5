package rendezvous

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/secret"
)

// acceptor is what Server and RoundServer share: their listeners, their
// connections and the goroutines that handle them, until close.
type acceptor struct {
	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]bool
	conns     map[net.Conn]bool
	wg        sync.WaitGroup
}

func newAcceptor() acceptor {
	return acceptor{listeners: map[net.Listener]bool{}, conns: map[net.Conn]bool{}}
}

// isClosed reports whether close was called.
func (a *acceptor) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// serve accepts connections on l until close, running handle for each on
// its own goroutine (the connection is closed after it); it returns nil
// after close, or the listener's error.
func (a *acceptor) serve(l net.Listener, handle func(net.Conn)) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		l.Close()
		return nil
	}
	a.listeners[l] = true
	a.mu.Unlock()
	var pause time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if a.isClosed() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() { // e.g. out of descriptors for a moment
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				time.Sleep(pause)
				continue
			}
			return err
		}
		pause = 0
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			c.Close()
			return nil
		}
		a.conns[c] = true
		a.wg.Add(1)
		a.mu.Unlock()
		go func() {
			defer a.wg.Done()
			defer func() {
				a.mu.Lock()
				delete(a.conns, c)
				a.mu.Unlock()
				c.Close()
			}()
			handle(c)
		}()
	}
}

// close closes the listeners and every connection, and waits for the
// handlers.
func (a *acceptor) close() {
	a.mu.Lock()
	a.closed = true
	for l := range a.listeners {
		l.Close()
	}
	for c := range a.conns {
		c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
}

// readJoin runs the server's side of the handshake on c and reads the
// worker's join; on failure it logs why (through logf, if not nil) and
// returns false.
func readJoin(c net.Conn, key []byte, logf func(string, ...any)) (toServer, bool) {
	log := func(format string, args ...any) {
		if logf != nil {
			logf(format, args...)
		}
	}
	if err := secret.Handshake(c, key, secret.Acceptor, HandshakeTimeout); err != nil {
		log("rendezvous: refused a connection from %v: %v", c.RemoteAddr(), err)
		return toServer{}, false
	}
	_ = c.SetReadDeadline(time.Now().Add(HandshakeTimeout))
	var m toServer
	if err := readFrame(c, maxJoinBytes, &m); err != nil || m.Join == nil {
		if err == nil {
			err = errors.New("the first message is not a join")
		}
		log("rendezvous: dropped a connection from %v: %v", c.RemoteAddr(), err)
		return toServer{}, false
	}
	_ = c.SetReadDeadline(time.Time{})
	return m, true
}
