package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// ErrClosed is wrapped by the error of a rendezvous that ended because its
// server was closed before every slot had joined.
var ErrClosed = errors.New("rendezvous: the server was closed")

// HandshakeTimeout bounds the handshake and the join message of one
// connection: a peer that says nothing for this long is dropped.
const HandshakeTimeout = 10 * time.Second

// writeTimeout bounds the writing of one answer to one worker.
const writeTimeout = 30 * time.Second

// Server is the launcher's side of the rendezvous: it admits the workers
// that know the job's secret and hold an expected slot, and answers them
// all once every slot has joined. Its methods may be called from any
// goroutine.
type Server struct {
	// Logf, when not nil, is told about connections the server refuses (a
	// wrong secret, an unexpected or duplicate slot). Set it before Serve.
	Logf func(format string, args ...any)

	secret []byte
	expect []Slot
	index  map[Slot]int
	plan   []Assignment

	mu       sync.Mutex
	joined   []*peer // by rank; nil: not joined
	njoined  int
	finished bool  // complete, failed or closed
	result   error // nil once complete
	done     chan struct{}
	acc      acceptor
	refused  refusalLog
}

// peer is one joined worker's connection.
type peer struct {
	conn   net.Conn
	member Member
	wmu    sync.Mutex // one writer at a time
}

func (p *peer) send(m toWorker) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = p.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	return writeFrame(p.conn, m)
}

// NewServer returns a server for a job of the expected slots, in rank
// order (the launcher's plan: hosts in -H order, local ranks ascending on
// each; see Assign for the rules). secret is the job's key (see
// internal/job/secret).
func NewServer(secret []byte, expect []Slot) (*Server, error) {
	if len(secret) == 0 {
		return nil, errors.New("rendezvous: no secret")
	}
	plan, err := Assign(expect)
	if err != nil {
		return nil, err
	}
	s := &Server{
		secret: append([]byte(nil), secret...),
		expect: append([]Slot(nil), expect...),
		index:  make(map[Slot]int, len(expect)),
		plan:   plan,
		joined: make([]*peer, len(expect)),
		done:   make(chan struct{}),
		acc:    newAcceptor(),
	}
	for i, sl := range expect {
		s.index[sl] = i
	}
	return s, nil
}

// Serve accepts connections on l until Close; it returns nil after Close,
// or the listener's error. Serve may run on several listeners at once.
func (s *Server) Serve(l net.Listener) error { return s.acc.serve(l, s.handle) }

func (s *Server) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

// logRefused logs a refused connection, rate-limited (refusalLog).
func (s *Server) logRefused(format string, args ...any) {
	s.refused.logf(s.Logf, format, args...)
}

// handle runs one connection: handshake, join, then reading until the
// worker goes away (its slot is given back if that happens before the
// assignment) or asks which slots are missing.
func (s *Server) handle(c net.Conn) {
	m, ok := readJoin(c, s.secret, s.logRefused)
	if !ok {
		return
	}
	p := &peer{conn: c, member: *m.Join}
	if m.Elastic {
		refusal := toWorker{Error: fmt.Sprintf("rendezvous: %v is a worker of an elastic job, but the launcher runs a fixed one "+
			"(HOROVOD_ELASTIC is set in the worker's environment, not by this launcher)", p.member.Slot)}
		s.logRefused("rendezvous: refused %v from %v: %s", p.member.Slot, c.RemoteAddr(), refusal.Error)
		_ = p.send(refusal)
		return
	}
	rank, refusal := s.admit(p)
	if refusal != nil {
		s.logRefused("rendezvous: refused %v from %v: %s", p.member.Slot, c.RemoteAddr(), refusal.Error)
		_ = p.send(*refusal)
		return
	}
	for {
		var q toServer
		if err := readFrame(c, maxJoinBytes, &q); err != nil {
			s.leave(rank, p)
			return
		}
		if q.Missing {
			s.mu.Lock()
			missing := s.missing()
			s.mu.Unlock()
			_ = p.send(toWorker{Missing: missing, Size: len(s.expect)})
		}
	}
}

// admit records p in its slot, or returns the message that refuses it.
// The last worker to arrive completes the rendezvous.
func (s *Server) admit(p *peer) (int, *toWorker) {
	s.mu.Lock()
	rank, ok := s.index[p.member.Slot]
	switch {
	case !ok:
		s.mu.Unlock()
		return -1, &toWorker{Error: fmt.Sprintf("rendezvous: %v is not a slot of this job (expected %s)", p.member.Slot, describe(s.expect))}
	case s.finished && s.result != nil:
		var f toWorker
		s.failure(&f)
		s.mu.Unlock()
		return -1, &f
	case s.finished:
		s.mu.Unlock()
		return -1, &toWorker{Error: fmt.Sprintf("rendezvous: %v joins after the rendezvous has completed", p.member.Slot)}
	case s.joined[rank] != nil:
		s.mu.Unlock()
		return -1, &toWorker{Error: fmt.Sprintf("rendezvous: %v has already joined: two workers were started with the same HOROVOD_HOSTNAME and HOROVOD_LOCAL_RANK", p.member.Slot)}
	}
	s.joined[rank] = p
	s.njoined++
	if s.njoined < len(s.expect) {
		s.mu.Unlock()
		return rank, nil
	}
	s.finished = true
	peers := append([]*peer(nil), s.joined...)
	close(s.done)
	s.mu.Unlock()
	s.answer(peers)
	return rank, nil
}

// answer sends every worker its assignment, at once.
func (s *Server) answer(peers []*peer) { sendAssignments(peers, s.expect, s.plan, 0, s.Logf) }

// leave gives p's slot back when its worker disconnects before the
// rendezvous has completed.
func (s *Server) leave(rank int, p *peer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.finished && s.joined[rank] == p {
		s.joined[rank] = nil
		s.njoined--
	}
}

// missing lists the slots not joined, in rank order. s.mu is held.
func (s *Server) missing() []Slot {
	var out []Slot
	for i, p := range s.joined {
		if p == nil {
			out = append(out, s.expect[i])
		}
	}
	return out
}

// failure fills m with the rendezvous' failure. s.mu is held.
func (s *Server) failure(m *toWorker) {
	var me *MissingError
	if errors.As(s.result, &me) {
		m.Missing, m.Size, m.Reason = me.Missing, me.Size, me.Reason
		return
	}
	m.Error = s.result.Error()
}

// fail ends a rendezvous that has not completed with err (built from the
// missing slots) and tells every joined worker; it returns the result of
// the rendezvous, which is nil if it completed first.
func (s *Server) fail(reason string, cause error) error {
	s.mu.Lock()
	if s.finished {
		defer s.mu.Unlock()
		return s.result
	}
	s.finished = true
	s.result = &MissingError{Missing: s.missing(), Size: len(s.expect), Reason: reason, Cause: cause}
	var m toWorker
	s.failure(&m)
	var peers []*peer
	for _, p := range s.joined {
		if p != nil {
			peers = append(peers, p)
		}
	}
	close(s.done)
	err := s.result
	s.mu.Unlock()
	for _, p := range peers {
		_ = p.send(m)
		p.conn.Close()
	}
	return err
}

// Wait returns nil once every slot has joined (and has been sent its
// assignment), or, when ctx ends first, a *MissingError naming the slots
// that never arrived (the joined workers are told the same and the
// rendezvous is over). After Close it returns such an error wrapping
// ErrClosed.
func (s *Server) Wait(ctx context.Context) error {
	select {
	case <-s.done:
	case <-ctx.Done():
		reason := "timed out"
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			reason = "was cancelled"
		}
		return s.fail(reason, ctx.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.result
}

// Done is closed when the rendezvous is over: complete, failed or closed.
func (s *Server) Done() <-chan struct{} { return s.done }

// Close stops the server: its listeners, and every connection. A
// rendezvous still waiting ends with an error wrapping ErrClosed, which the
// joined workers are told. Close waits for the server's goroutines.
func (s *Server) Close() error {
	s.fail("ended: the server was closed", ErrClosed)
	s.acc.close()
	s.refused.flush()
	return nil
}

// describe summarises the expected slots: "h1: local ranks 0-3, h2: local
// rank 0".
func describe(expect []Slot) string {
	var parts []string
	for i := 0; i < len(expect); {
		j := i
		for j < len(expect) && expect[j].Host == expect[i].Host {
			j++
		}
		if j-i == 1 {
			parts = append(parts, fmt.Sprintf("%s: local rank 0", expect[i].Host))
		} else {
			parts = append(parts, fmt.Sprintf("%s: local ranks 0-%d", expect[i].Host, j-i-1))
		}
		if len(parts) == maxNamed && j < len(expect) {
			parts = append(parts, "...")
			break
		}
		i = j
	}
	return strings.Join(parts, ", ")
}
