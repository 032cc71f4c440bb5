package liveness

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/secret"
)

// Frozen is a rank declared frozen: it sent nothing on the heartbeat
// channel for Silent, longer than the timeout.
type Frozen struct {
	Rank   int
	Host   string        // its host, as it reported it ("" if unknown)
	Silent time.Duration // how long it had been silent
	// Unreachable says that its host sent nothing at all either: not even
	// the kernel's TCP acknowledgements of our heartbeats came back
	// (Unreachable decides), so its node or its network went silent,
	// rather than the process alone. A stopped or wedged process's kernel
	// still acknowledges what it is sent.
	Unreachable bool
}

// Unreachable decides whether a rank silent for silent, whose connection's
// last TCP acknowledgement came sinceAck ago (known: whether the kernel
// could tell), is cut off rather than frozen: the heartbeats we sent it
// every interval went unacknowledged for all but the last two intervals
// of its silence. A frozen process's kernel acknowledges each within a
// round trip.
func Unreachable(silent, sinceAck, interval time.Duration, known bool) bool {
	return known && sinceAck >= silent-2*interval
}

// Config configures one rank's member of the star.
type Config struct {
	Rank, Size int
	Host       string // this rank's host, for the reports of others
	// RootHost is rank 0's host, named if rank 0 itself freezes.
	RootHost string
	// Key is the job's secret: every connection proves it first.
	Key []byte
	// Timeout is how long a rank may stay silent before it is declared
	// frozen. It must be positive.
	Timeout time.Duration
	// Interval is the time between two heartbeats; zero means a tenth of
	// Timeout, at most one second.
	Interval time.Duration
	// OnFrozen is called at most once, from the star's own goroutine, when
	// this rank learns of a frozen rank (rank 0 hears it itself; the others
	// are told by rank 0, or find rank 0 itself silent).
	OnFrozen func(Frozen)
	// Logf, if not nil, receives what the star could not do (a rank that
	// could not reach rank 0 is not checked; that is said, not fatal).
	Logf func(format string, args ...any)
}

// The bytes of the heartbeat channel after the handshake. A member sends
// hello once (rank, host), then beats; rank 0 also sends frozen notices.
const (
	beat   byte = 'H'
	frozen byte = 'F'
)

// handshakeTimeout bounds the secret's handshake on one connection.
const handshakeTimeout = 10 * time.Second

// Star is one rank's member of the heartbeat star: rank 0 accepts every
// other rank and hears them all; the others dial rank 0 and hear it.
type Star struct {
	cfg      Config
	interval time.Duration
	ln       net.Listener // rank 0

	mu    sync.Mutex
	tr    *Tracker
	conns map[int]net.Conn // rank 0: the members; others: {0: rank 0}
	hosts map[int]string
	fired bool

	paused atomic.Bool // tests: act as a stopped process (send and read nothing)
	done   chan struct{}
	wg     sync.WaitGroup
}

// Listen opens rank 0's listener on every interface and returns it with
// the addresses the other ranks should try, loopback first.
func Listen() (net.Listener, []string, error) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, nil, fmt.Errorf("liveness: listen: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	addrs := []string{net.JoinHostPort("127.0.0.1", fmt.Sprint(port))}
	ifs, _ := net.InterfaceAddrs()
	for _, a := range ifs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() || ipn.IP.IsMulticast() {
			continue
		}
		addrs = append(addrs, net.JoinHostPort(ipn.IP.String(), fmt.Sprint(port)))
	}
	return ln, addrs, nil
}

// Start starts this rank's member of the star and returns at once: rank 0
// (which passes the listener from Listen) accepts the others, the others
// dial addrs (the addresses Listen returned on rank 0) in the background.
func Start(cfg Config, ln net.Listener, addrs []string) (*Star, error) {
	switch {
	case cfg.Timeout <= 0:
		return nil, errors.New("liveness: the timeout must be positive")
	case cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size:
		return nil, fmt.Errorf("liveness: rank %d of %d", cfg.Rank, cfg.Size)
	case len(cfg.Key) == 0:
		return nil, errors.New("liveness: no key")
	case cfg.Rank == 0 && ln == nil:
		return nil, errors.New("liveness: rank 0 needs its listener")
	case cfg.Rank != 0 && len(addrs) == 0:
		return nil, errors.New("liveness: no address of rank 0")
	}
	iv := cfg.Interval
	if iv <= 0 {
		iv = min(cfg.Timeout/10, time.Second)
	}
	s := &Star{cfg: cfg, interval: iv, ln: ln, tr: NewTracker(cfg.Size),
		conns: map[int]net.Conn{}, hosts: map[int]string{0: cfg.RootHost}, done: make(chan struct{})}
	if cfg.Rank == 0 {
		s.wg.Add(1)
		go s.accept()
	} else {
		s.wg.Add(1)
		go s.dial(addrs)
	}
	s.wg.Add(1)
	go s.tick()
	return s, nil
}

// Close stops the star: it closes every connection (to the others, a rank
// that left, not a frozen one) and waits for the star's goroutines.
func (s *Star) Close() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	close(s.done)
	if s.ln != nil {
		s.ln.Close()
	}
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *Star) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

func (s *Star) closed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// accept is rank 0's: it takes every member's connection and reads it.
func (s *Star) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.member(c)
		}()
	}
}

// member runs rank 0's side of one member's connection.
func (s *Star) member(c net.Conn) {
	if err := secret.Handshake(c, s.cfg.Key, secret.Acceptor, handshakeTimeout); err != nil {
		s.logf("liveness: refused a heartbeat connection from %v: %v", c.RemoteAddr(), err)
		c.Close()
		return
	}
	br := bufio.NewReader(c)
	r, host, err := readHello(br, s.cfg.Size)
	if err != nil {
		s.logf("liveness: heartbeat connection from %v: %v", c.RemoteAddr(), err)
		c.Close()
		return
	}
	s.mu.Lock()
	if s.closed() || s.conns[r] != nil {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.conns[r], s.hosts[r] = c, host
	capRTO(c)
	s.tr.Track(r, time.Now())
	s.mu.Unlock()
	s.read(br, r)
}

// dial is the other ranks': it reaches rank 0 on the first address that
// answers with the key, then reads it.
func (s *Star) dial(addrs []string) {
	defer s.wg.Done()
	deadline := time.Now().Add(s.cfg.Timeout)
	var lastErr error
	for !s.closed() && time.Now().Before(deadline) {
		for _, a := range addrs {
			c, err := net.DialTimeout("tcp", a, 2*time.Second)
			if err == nil {
				err = secret.Handshake(c, s.cfg.Key, secret.Dialer, handshakeTimeout)
				if err == nil {
					err = writeHello(c, s.cfg.Rank, s.cfg.Host)
				}
				if err == nil {
					s.mu.Lock()
					if s.closed() {
						s.mu.Unlock()
						c.Close()
						return
					}
					s.conns[0] = c
					capRTO(c)
					s.tr.Track(0, time.Now())
					s.mu.Unlock()
					s.read(bufio.NewReader(c), 0)
					return
				}
				c.Close()
			}
			lastErr = err
		}
		select {
		case <-s.done:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	if !s.closed() {
		s.logf("liveness: rank %d could not reach rank 0's heartbeat channel (%v): frozen ranks are not detected from here", s.cfg.Rank, lastErr)
	}
}

// read consumes peer r's bytes: any byte is a sign of life; a frozen
// notice from rank 0 is passed on. When the connection closes, r left.
func (s *Star) read(br *bufio.Reader, r int) {
	for {
		b, err := br.ReadByte()
		if err != nil {
			s.mu.Lock()
			s.tr.Gone(r)
			s.mu.Unlock()
			return
		}
		for s.paused.Load() && !s.closed() {
			time.Sleep(10 * time.Millisecond)
		}
		s.mu.Lock()
		s.tr.Heard(r, time.Now())
		s.mu.Unlock()
		if b == frozen {
			f, err := readFrozen(br, s.cfg.Size)
			if err != nil {
				s.logf("liveness: bad frozen notice from rank %d: %v", r, err)
				continue
			}
			s.fire(f)
		}
	}
}

// tick beats and checks, every interval, until Close.
func (s *Star) tick() {
	defer s.wg.Done()
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		if s.paused.Load() {
			continue
		}
		now := time.Now()
		s.mu.Lock()
		silent := s.tr.Silent(now, s.cfg.Timeout)
		conns := make(map[int]net.Conn, len(s.conns))
		for r, c := range s.conns {
			conns[r] = c
		}
		var f Frozen
		if len(silent) > 0 {
			f = Frozen{Rank: silent[0].Rank, Host: s.hosts[silent[0].Rank], Silent: silent[0].For}
			if c := s.conns[f.Rank]; c != nil {
				ack, known := sinceAck(c)
				f.Unreachable = Unreachable(f.Silent, ack, s.interval, known)
			}
		}
		s.mu.Unlock()
		msg := []byte{beat}
		if len(silent) > 0 && s.cfg.Rank == 0 {
			msg = appendFrozen(msg, f)
		}
		for r, c := range conns {
			if len(silent) > 0 && r == f.Rank {
				continue
			}
			c.SetWriteDeadline(now.Add(s.interval))
			c.Write(msg) // a member that cannot take a beat in time is not waited for
		}
		if len(silent) > 0 {
			s.fire(f)
		}
	}
}

// fire calls OnFrozen once.
func (s *Star) fire(f Frozen) {
	s.mu.Lock()
	already := s.fired
	s.fired = true
	s.mu.Unlock()
	if !already && s.cfg.OnFrozen != nil {
		s.cfg.OnFrozen(f)
	}
}

func writeHello(w io.Writer, rank int, host string) error {
	if len(host) > 255 {
		host = host[:255]
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(rank))
	b = append(b, byte(len(host)))
	_, err := w.Write(append(b, host...))
	return err
}

func readHello(br *bufio.Reader, size int) (int, string, error) {
	var h [5]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return 0, "", fmt.Errorf("hello: %w", err)
	}
	r := int(binary.BigEndian.Uint32(h[:4]))
	if r <= 0 || r >= size {
		return 0, "", fmt.Errorf("hello from rank %d of %d", r, size)
	}
	host := make([]byte, h[4])
	if _, err := io.ReadFull(br, host); err != nil {
		return 0, "", fmt.Errorf("hello: %w", err)
	}
	return r, string(host), nil
}

// appendFrozen appends a frozen notice: the byte, the rank, the silence in
// milliseconds, a flags byte (1: unreachable), the host.
func appendFrozen(b []byte, f Frozen) []byte {
	host := f.Host
	if len(host) > 255 {
		host = host[:255]
	}
	b = append(b, frozen)
	b = binary.BigEndian.AppendUint32(b, uint32(f.Rank))
	b = binary.BigEndian.AppendUint32(b, uint32(min(f.Silent.Milliseconds(), 1<<32-1)))
	var flags byte
	if f.Unreachable {
		flags = 1
	}
	b = append(b, flags, byte(len(host)))
	return append(b, host...)
}

// readFrozen reads a frozen notice after its first byte.
func readFrozen(br *bufio.Reader, size int) (Frozen, error) {
	var h [10]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return Frozen{}, err
	}
	r := int(binary.BigEndian.Uint32(h[:4]))
	if r < 0 || r >= size {
		return Frozen{}, fmt.Errorf("rank %d of %d", r, size)
	}
	if h[8] > 1 {
		return Frozen{}, fmt.Errorf("flags %#x", h[8])
	}
	host := make([]byte, h[9])
	if _, err := io.ReadFull(br, host); err != nil {
		return Frozen{}, err
	}
	return Frozen{Rank: r, Host: string(host), Silent: time.Duration(binary.BigEndian.Uint32(h[4:8])) * time.Millisecond,
		Unreachable: h[8] == 1}, nil
}
