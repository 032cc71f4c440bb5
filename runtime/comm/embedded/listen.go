package embedded

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/gohorovod/gohorovod/internal/sockdir"
)

// Peer is how to reach one rank.
type Peer struct {
	// Host is the rank's host identity: ranks with equal Host share a
	// machine, talk over Unix sockets when both have one, and form one group
	// in SplitLocal.
	Host string
	// TCP is the "ip:port" of the rank's TCP listener.
	TCP string
	// Unix is the path of the rank's Unix-socket listener, "" when it has
	// none.
	Unix string
}

// Listeners are one rank's listeners, opened before rendezvous so that their
// addresses can be published (Peer) and handed to New.
type Listeners struct {
	host string
	tcp  *net.TCPListener
	unix *net.UnixListener // nil without a Unix socket
	path string

	ownDir string // a private directory ListenPrivate made; Close removes it

	closeOnce sync.Once
	closeErr  error
}

// sockSeq numbers the Unix sockets of this process, so that several ranks
// (tests run them as goroutines) can share one directory.
var sockSeq atomic.Uint64

// maxSockPath is the longest Unix socket path Linux accepts (sun_path is
// 108 bytes, NUL included).
const maxSockPath = 107

// Listen opens this rank's listeners: TCP on tcpAddr ("0.0.0.0:0" for any
// interface and a free port, "10.1.0.2:0" for one network, or a fixed port),
// and, when unixDir is not "", a Unix socket in that directory (its file is
// removed by Close). host is the rank's host identity (see Peer.Host). A
// port already in use, or a socket path longer than the 107 bytes Linux
// allows, is an error that says so.
func Listen(host, tcpAddr, unixDir string) (*Listeners, error) {
	if host == "" {
		return nil, errors.New("embedded: listen: empty host identity")
	}
	ln, err := net.Listen("tcp", tcpAddr)
	if err != nil {
		return nil, fmt.Errorf("embedded: listen on TCP %s: %w", tcpAddr, err)
	}
	l := &Listeners{host: host, tcp: ln.(*net.TCPListener)}
	if unixDir == "" {
		return l, nil
	}
	path := filepath.Join(unixDir, fmt.Sprintf("ghv-%d-%d.sock", os.Getpid(), sockSeq.Add(1)))
	if len(path) > maxSockPath {
		l.tcp.Close()
		return nil, fmt.Errorf("embedded: listen: Unix socket path %q has %d bytes, more than the %d Linux allows; use a shorter directory", path, len(path), maxSockPath)
	}
	// The name holds this process's pid, which no live process shares: a
	// file there was left by a dead process that had the same pid (killed
	// before its Close), and would make the bind fail.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.tcp.Close()
		return nil, fmt.Errorf("embedded: listen: removing a stale Unix socket %s: %w", path, err)
	}
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		l.tcp.Close()
		return nil, fmt.Errorf("embedded: listen on Unix socket %s: %w", path, err)
	}
	ul.SetUnlinkOnClose(true)
	l.unix, l.path = ul, path
	return l, nil
}

// ListenPrivate is Listen with a Unix socket in dir, a directory the
// launcher made for the job (only its user may enter it), or, when dir is
// "" or does not exist here (a remote host), in a directory of this
// process's own, made like it by PrivateDir, which Close removes. Another
// local user can neither reach nor block the socket.
func ListenPrivate(host, tcpAddr, dir string) (*Listeners, error) {
	if dir != "" {
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return Listen(host, tcpAddr, dir)
		}
	}
	own, err := PrivateDir()
	if err != nil {
		return nil, err
	}
	l, err := Listen(host, tcpAddr, own)
	if err != nil {
		sockdir.Remove(own)
		return nil, err
	}
	l.ownDir = own
	return l, nil
}

// PrivateDir makes a directory for Unix sockets that only this user may
// enter (mode 0700), with an unpredictable name ("ghv-" and random
// digits), under $XDG_RUNTIME_DIR, else $TMPDIR, else /tmp: the first that
// is an absolute path to a directory short enough for a socket's path.
// The directory stays locked while this process lives; making it first
// removes the directories there that dead processes left (package
// sockdir).
func PrivateDir() (string, error) {
	base := "/tmp"
	for _, k := range []string{"XDG_RUNTIME_DIR", "TMPDIR"} {
		if v := os.Getenv(k); filepath.IsAbs(v) && len(v) <= maxSockBase {
			if st, err := os.Stat(v); err == nil && st.IsDir() {
				base = v
				break
			}
		}
	}
	dir, err := sockdir.Make(base)
	if err != nil {
		return "", fmt.Errorf("embedded: a directory for the Unix sockets: %w", err)
	}
	return dir, nil
}

// maxSockBase leaves room under PrivateDir's base for the directory and a
// socket's name in it.
const maxSockBase = 64

// Peer returns the addresses to publish for this rank. When the TCP
// listener is bound to a specific IP, that IP is published. When it is
// bound to every interface (0.0.0.0 or ::), Peer publishes the host
// identity if it is an IP address, else the first non-loopback IPv4 address
// of an interface that is up, else 127.0.0.1. Callers on hosts with several
// networks should bind the listener to the IP the other hosts reach (the
// launcher's rendezvous knows it) rather than rely on that guess.
func (l *Listeners) Peer() Peer {
	a := l.tcp.Addr().(*net.TCPAddr)
	ip := a.IP
	if ip == nil || ip.IsUnspecified() {
		ip = publicIP(l.host)
	}
	return Peer{Host: l.host, TCP: net.JoinHostPort(ip.String(), fmt.Sprint(a.Port)), Unix: l.path}
}

// publicIP guesses an address other hosts can reach this one at.
func publicIP(host string) net.IP {
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return ip
	}
	ifs, err := net.Interfaces()
	if err == nil {
		for _, ifc := range ifs {
			if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, err := ifc.Addrs()
			if err != nil {
				continue
			}
			for _, ad := range addrs {
				if n, ok := ad.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
					return n.IP
				}
			}
		}
	}
	return net.IPv4(127, 0, 0, 1)
}

// Close closes the listeners and removes the Unix socket file (and the
// directory ListenPrivate made for it). It is idempotent. Communicators already made by New keep working.
func (l *Listeners) Close() error {
	l.closeOnce.Do(func() {
		err := l.tcp.Close()
		if l.unix != nil {
			err = errors.Join(err, l.unix.Close())
		}
		if l.ownDir != "" {
			err = errors.Join(err, sockdir.Remove(l.ownDir))
		}
		l.closeErr = err
	})
	return l.closeErr
}
