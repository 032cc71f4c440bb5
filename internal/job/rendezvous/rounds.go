package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
)

// HostUpdate is a change of an elastic job's hosts, as the launcher tells
// the coordinator (rank 0 of the current round): Horovod's
// HostUpdateResult (removed, added or both) with a sequence number that
// grows with every update of the job.
type HostUpdate struct {
	Seq     int  `json:"seq"`
	Added   bool `json:"added,omitempty"`
	Removed bool `json:"removed,omitempty"`
}

// ErrRemoved is returned by JoinRound to a worker that the new round has no
// place for (its host was removed or blacklisted, or --max-np was reached):
// Horovod's "has been removed from elastic job". The worker should exit.
var ErrRemoved = errors.New("rendezvous: this worker has been removed from the elastic job")

// RoundServer is the rendezvous of an elastic job (horovodrun's elastic
// driver side): the job goes through rounds, each with its own members,
// and a worker that leaves a round (its group failed, or the hosts changed)
// joins again to learn its place in the next one.
//
// The launcher begins each round with StartRound, giving its members in
// rank order, before it starts the round's new workers. A worker's join
// says which round it was last a member of. A new worker (none yet) joins
// the current round if it is a member and the round has not completed;
// otherwise it waits for a round that has it. A worker that was a member
// of the current round asks for the next one: the server reports its slot
// to OnReady (Horovod's record_ready) and keeps it waiting until the
// launcher starts the next round, where it gets its new assignment, or is
// told it was removed (ErrRemoved). A round completes, and every member is
// answered at once, when all its members have joined; their connections
// then stay open, so that Notify can send the coordinator a host update.
//
// Break marks the current round failed before it completed (one of its
// workers exited): its waiting members, and any that joins later, are
// reported to OnReady, as if they had left a completed round.
//
// Every connection proves the job's secret first, as with Server. The
// methods may be called from any goroutine.
type RoundServer struct {
	// OnReady, when not nil, is told the slot of each worker that asks to
	// join the next round. It is called from the server's goroutines, with
	// no lock held, one call at a time, in the order the workers asked.
	// Set it before Serve.
	OnReady func(Slot)
	// OnFrozen, when not nil, is told the slot of a member that a worker
	// of the current round reports frozen (Session.ReportFrozen), from the
	// goroutine of that worker's connection; reports may repeat.
	OnFrozen func(Slot)
	// Logf, when not nil, is told about refused connections. Set it before
	// Serve.
	Logf func(format string, args ...any)

	secret []byte

	mu       sync.Mutex
	round    int // the current round; 0 before the first
	members  []Slot
	plan     []Assignment
	index    map[Slot]int
	joined   []*peer // by rank; nil: not joined
	njoined  int
	complete bool
	broken   bool
	waiting  map[Slot]*peer // joined, waiting for a round that has them
	sessions map[Slot]*peer // members of the completed current round
	readyQ   []Slot         // reports not yet given to OnReady
	readying bool           // a goroutine is calling OnReady

	closed  bool // Close was called
	acc     acceptor
	refused refusalLog
}

// NewRoundServer returns the rendezvous of an elastic job whose
// connections prove secret. No round has begun: workers that join wait for
// StartRound.
func NewRoundServer(secret []byte) (*RoundServer, error) {
	if len(secret) == 0 {
		return nil, errors.New("rendezvous: no secret")
	}
	return &RoundServer{
		secret:   append([]byte(nil), secret...),
		waiting:  map[Slot]*peer{},
		sessions: map[Slot]*peer{},
		acc:      newAcceptor(),
	}, nil
}

func (s *RoundServer) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

// logRefused logs a refused connection, rate-limited (refusalLog).
func (s *RoundServer) logRefused(format string, args ...any) {
	s.refused.logf(s.Logf, format, args...)
}

// Serve accepts connections on l until Close; it returns nil after Close,
// or the listener's error.
func (s *RoundServer) Serve(l net.Listener) error { return s.acc.serve(l, s.handle) }

// handle runs one connection: handshake, join, then reading until the
// worker goes away.
func (s *RoundServer) handle(c net.Conn) {
	m, ok := readJoin(c, s.secret, s.logRefused)
	if !ok {
		return
	}
	p := &peer{conn: c, member: *m.Join}
	if !m.Elastic {
		refusal := toWorker{Error: fmt.Sprintf("rendezvous: %v is a worker of a fixed job, but the launcher runs an elastic one "+
			"(the worker's environment lacks HOROVOD_ELASTIC=1)", p.member.Slot)}
		s.logRefused("rendezvous: refused %v from %v: %s", p.member.Slot, c.RemoteAddr(), refusal.Error)
		_ = p.send(refusal)
		return
	}
	if refusal := s.admit(p, m.Last); refusal != nil {
		s.logRefused("rendezvous: refused %v from %v: %s", p.member.Slot, c.RemoteAddr(), refusal.Error)
		_ = p.send(*refusal)
		return
	}
	for {
		var q toServer
		if err := readFrame(c, maxJoinBytes, &q); err != nil {
			s.leave(p)
			return
		}
		if q.Frozen != nil && s.OnFrozen != nil {
			switch s.judgeReport(p.member.Slot, *q.Frozen) {
			case reportStale:
				// A worker the job re-formed without (its node went silent
				// and came back): it must not stop the new round's
				// members. It is removed, as a member left out of a
				// round is.
				s.logf("rendezvous: refused %v's report that %v froze: %v is no member of round %d (the job re-formed without it); removing it",
					p.member.Slot, *q.Frozen, p.member.Slot, s.currentRound())
				_ = p.send(toWorker{Removed: true})
				s.leave(p)
				p.conn.Close()
				return
			case reportPast:
				s.logf("rendezvous: ignored %v's report that %v froze: it is no member of round %d", p.member.Slot, *q.Frozen, s.currentRound())
			default:
				s.logf("rendezvous: %v reports %v frozen", p.member.Slot, *q.Frozen)
				s.OnFrozen(*q.Frozen)
			}
		}
	}
}

// How a frozen report is taken (judgeReport).
const (
	reportTaken = iota // passed on to OnFrozen
	reportStale        // from a worker that is no member of the current round
	reportPast         // about a worker that is no member of the current round
)

// judgeReport decides what a report from the worker of slot from, that
// the worker of slot about froze, is worth: only members of the current
// round (joined or not yet) speak for it, and only about its members.
func (s *RoundServer) judgeReport(from, about Slot) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.index[from]; !ok {
		return reportStale
	}
	if _, ok := s.index[about]; !ok {
		return reportPast
	}
	return reportTaken
}

func (s *RoundServer) currentRound() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.round
}

// admit places a joining worker: in the current round, or waiting for the
// next (reported to OnReady when it leaves, or belongs to, the current
// round).
func (s *RoundServer) admit(p *peer, last int) *toWorker {
	sl := p.member.Slot
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return &toWorker{Error: "rendezvous: the elastic job has ended"}
	}
	if q := s.waiting[sl]; q != nil {
		s.mu.Unlock()
		return &toWorker{Error: fmt.Sprintf("rendezvous: %v is already waiting for the next round: two workers were started with the same HOROVOD_HOSTNAME and HOROVOD_LOCAL_RANK", sl)}
	}
	rank, member := s.index[sl]
	if member && !s.complete && s.joined[rank] != nil {
		s.mu.Unlock()
		return &toWorker{Error: fmt.Sprintf("rendezvous: %v has already joined round %d: two workers were started with the same HOROVOD_HOSTNAME and HOROVOD_LOCAL_RANK", sl, s.round)}
	}
	// The worker's session of an earlier round is over.
	if q := s.sessions[sl]; q != nil {
		delete(s.sessions, sl)
	}
	if member && !s.complete && !s.broken && last < s.round {
		s.joined[rank] = p
		s.njoined++
		peers := s.completeIfFull()
		s.mu.Unlock()
		s.answer(peers)
		return nil
	}
	s.waiting[sl] = p
	if member && (last == s.round || s.broken) {
		s.report(sl)
	}
	s.mu.Unlock()
	s.flushReady()
	return nil
}

// completeIfFull completes the current round when every member has joined
// and returns its peers to answer (nil otherwise). s.mu is held.
func (s *RoundServer) completeIfFull() []*peer {
	if s.round == 0 || s.complete || s.njoined < len(s.members) {
		return nil
	}
	s.complete = true
	peers := append([]*peer(nil), s.joined...)
	for i, p := range peers {
		s.sessions[s.members[i]] = p
	}
	return peers
}

// answer sends every member of a completed round its assignment.
func (s *RoundServer) answer(peers []*peer) {
	if peers == nil {
		return
	}
	s.mu.Lock()
	plan, members, round := s.plan, s.members, s.round
	s.mu.Unlock()
	sendAssignments(peers, members, plan, round, s.Logf)
}

// report queues sl for OnReady. s.mu is held; call flushReady after
// unlocking.
func (s *RoundServer) report(sl Slot) { s.readyQ = append(s.readyQ, sl) }

// flushReady gives the queued reports to OnReady, in order, one call at a
// time, with no lock held.
func (s *RoundServer) flushReady() {
	s.mu.Lock()
	if s.readying {
		s.mu.Unlock()
		return // the goroutine already at it takes these too
	}
	s.readying = true
	for len(s.readyQ) > 0 {
		sl := s.readyQ[0]
		s.readyQ = s.readyQ[1:]
		s.mu.Unlock()
		if s.OnReady != nil {
			s.OnReady(sl)
		}
		s.mu.Lock()
	}
	s.readying = false
	s.mu.Unlock()
}

// leave forgets a worker whose connection ended: a waiting worker stops
// waiting, a member of a round still forming gives its slot back, and a
// completed round's session ends.
func (s *RoundServer) leave(p *peer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := p.member.Slot
	if s.waiting[sl] == p {
		delete(s.waiting, sl)
	}
	if s.sessions[sl] == p {
		delete(s.sessions, sl)
	}
	if rank, ok := s.index[sl]; ok && !s.complete && s.joined[rank] == p {
		s.joined[rank] = nil
		s.njoined--
	}
}

// StartRound begins round id (greater than every earlier round) with
// members in rank order (Assign's rules). Waiting workers that are members
// join it; the others are told they were removed. Call it before starting
// the round's new workers.
func (s *RoundServer) StartRound(id int, members []Slot) error {
	plan, err := Assign(members)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if id <= s.round {
		s.mu.Unlock()
		return fmt.Errorf("rendezvous: round %d does not follow round %d", id, s.round)
	}
	s.round, s.members, s.plan = id, append([]Slot(nil), members...), plan
	s.index = make(map[Slot]int, len(members))
	for i, sl := range members {
		s.index[sl] = i
	}
	s.joined, s.njoined = make([]*peer, len(members)), 0
	s.complete, s.broken = false, false
	clear(s.sessions)
	var removed []*peer
	for sl, p := range s.waiting {
		if rank, ok := s.index[sl]; ok {
			s.joined[rank] = p
			s.njoined++
		} else {
			removed = append(removed, p)
		}
		delete(s.waiting, sl)
	}
	peers := s.completeIfFull()
	s.mu.Unlock()
	for _, p := range removed {
		_ = p.send(toWorker{Removed: true})
		p.conn.Close()
	}
	s.answer(peers)
	return nil
}

// Break marks the current round failed if it has not completed: its
// members that have joined are reported to OnReady and wait for the next
// round, and so is any member that joins it later. It does nothing to a
// completed round, whose workers find out through their collectives.
func (s *RoundServer) Break() {
	s.mu.Lock()
	if s.round == 0 || s.complete || s.broken {
		s.mu.Unlock()
		return
	}
	s.broken = true
	for rank, p := range s.joined {
		if p != nil {
			s.waiting[s.members[rank]] = p
			s.joined[rank] = nil
			s.report(s.members[rank])
		}
	}
	s.njoined = 0
	s.mu.Unlock()
	s.flushReady()
}

// Notify sends u to the worker of slot sl, a member of the completed
// current round (the launcher sends host updates to rank 0).
func (s *RoundServer) Notify(sl Slot, u HostUpdate) error {
	s.mu.Lock()
	p := s.sessions[sl]
	s.mu.Unlock()
	if p == nil {
		return fmt.Errorf("rendezvous: %v is not connected as a member of the current round", sl)
	}
	return p.send(toWorker{Update: &u})
}

// Close stops the server: its listeners and every connection, so that
// workers waiting for a round get an error. It waits for the server's
// goroutines.
func (s *RoundServer) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.acc.close()
	s.refused.flush()
	return nil
}

// Session is an elastic worker's connection to the RoundServer after its
// assignment: it stays open for the round, and carries the host updates
// the launcher sends the coordinator. Close it before joining again.
type Session struct {
	conn net.Conn
	wmu  sync.Mutex // ReportFrozen's writes
	mu   sync.Mutex
	last HostUpdate // the latest update, merged (see TakeUpdate)
	has  bool
	done chan struct{}
}

// TakeUpdate returns the host updates received since the last call,
// merged: the latest sequence number, and whether any of them added or
// removed hosts. ok is false when none arrived.
func (se *Session) TakeUpdate() (u HostUpdate, ok bool) {
	se.mu.Lock()
	defer se.mu.Unlock()
	u, ok = se.last, se.has
	se.last, se.has = HostUpdate{}, false
	return u, ok
}

// read receives host updates until the connection ends.
func (se *Session) read() {
	defer close(se.done)
	for {
		var m toWorker
		if err := readFrame(se.conn, maxAssignmentBytes, &m); err != nil {
			return
		}
		if m.Update != nil {
			se.mu.Lock()
			se.last.Seq = max(se.last.Seq, m.Update.Seq)
			se.last.Added = se.last.Added || m.Update.Added
			se.last.Removed = se.last.Removed || m.Update.Removed
			se.has = true
			se.mu.Unlock()
		}
	}
}

// ReportFrozen tells the launcher that sl, a member of this session's
// round, was declared frozen (see RoundServer.OnFrozen), so that it stops
// that worker and the job can re-form without it.
func (se *Session) ReportFrozen(sl Slot) error {
	se.wmu.Lock()
	defer se.wmu.Unlock()
	return writeFrame(se.conn, toServer{Frozen: &sl})
}

// Close ends the session and waits for its reader.
func (se *Session) Close() error {
	err := se.conn.Close()
	<-se.done
	return err
}

// JoinRound takes part in an elastic job's rendezvous at addr (a
// RoundServer) as me; last is the round this worker was last a member of
// (Assignment.Round; 0 for a new worker). It returns this worker's
// assignment in the next round that has it, with the session that stays
// open for that round, or ErrRemoved when the job has no place for it any
// more. It waits as long as the launcher takes to form the round (the
// launcher bounds that with its elastic timeout), until ctx ends.
func JoinRound(ctx context.Context, addr string, secret []byte, me Member, last int) (Assignment, *Session, error) {
	if len(secret) == 0 {
		return Assignment{}, nil, errors.New("rendezvous: no secret (GOHOROVOD_SECRET)")
	}
	conn, err := dial(ctx, &net.Dialer{}, addr, secret)
	if err != nil {
		return Assignment{}, nil, err
	}
	if err := writeFrame(conn, toServer{Join: &me, Elastic: true, Last: last}); err != nil {
		conn.Close()
		return Assignment{}, nil, fmt.Errorf("rendezvous: sending the join to %s: %w", addr, err)
	}
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-stop:
		case <-ctx.Done():
			conn.Close()
		}
	}()
	var m fromServer
	err = readFrame(conn, maxAssignmentBytes, &m)
	close(stop)
	<-watched
	switch {
	case err != nil && ctx.Err() != nil:
		conn.Close()
		return Assignment{}, nil, fmt.Errorf("rendezvous at %s: %w while waiting for the next round", addr, ctx.Err())
	case err != nil:
		conn.Close()
		return Assignment{}, nil, fmt.Errorf("rendezvous at %s: the launcher closed the connection before the next round: %w", addr, err)
	case m.Removed:
		conn.Close()
		return Assignment{}, nil, ErrRemoved
	case m.Error != "":
		conn.Close()
		return Assignment{}, nil, errors.New(m.Error)
	case m.Assignment == nil:
		conn.Close()
		return Assignment{}, nil, errors.New("rendezvous: the launcher sent no assignment")
	}
	a := *m.Assignment
	a.Members = m.Members
	if len(a.Members) != a.Size || a.Rank < 0 || a.Rank >= a.Size || a.Members[a.Rank].Slot != me.Slot || a.Round <= last {
		conn.Close()
		return Assignment{}, nil, fmt.Errorf("rendezvous: inconsistent assignment (rank %d of %d, %d members, round %d after %d)", a.Rank, a.Size, len(a.Members), a.Round, last)
	}
	se := &Session{conn: conn, done: make(chan struct{})}
	go se.read()
	return a, se, nil
}
