package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/secret"
)

// askGrace is how long a worker whose deadline has passed waits for the
// server to say which slots are missing.
const askGrace = 2 * time.Second

// Join takes part in the rendezvous of the server at addr ("host:port")
// as me, and returns this worker's assignment once every slot has joined.
// It retries connecting until ctx ends (the server may start after the
// worker); a wrong secret, or a slot the server refuses (unexpected, or
// already joined), ends it at once with the reason. When ctx ends first,
// or the server's own deadline passes, the error is a *MissingError naming
// the slots that never arrived, where the server could say.
func Join(ctx context.Context, addr string, secret []byte, me Member) (Assignment, error) {
	return JoinVia(ctx, &net.Dialer{}, addr, secret, me)
}

// Dialer opens a worker's connection to the server: a *net.Dialer, or one
// that sets socket options first (a load generator's small receive
// buffers, a source address).
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// JoinVia is Join over a connection that d opens.
func JoinVia(ctx context.Context, d Dialer, addr string, secret []byte, me Member) (Assignment, error) {
	if len(secret) == 0 {
		return Assignment{}, errors.New("rendezvous: no secret (GOHOROVOD_SECRET)")
	}
	conn, err := dial(ctx, d, addr, secret)
	if err != nil {
		return Assignment{}, err
	}
	defer conn.Close()
	if err := writeFrame(conn, toServer{Join: &me}); err != nil {
		return Assignment{}, fmt.Errorf("rendezvous: sending the join to %s: %w", addr, err)
	}
	// When ctx ends first, ask the server which slots are missing and give
	// it askGrace to answer.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-stop:
			return
		case <-ctx.Done():
		}
		_ = conn.SetWriteDeadline(time.Now().Add(askGrace))
		_ = writeFrame(conn, toServer{Missing: true})
		_ = conn.SetReadDeadline(time.Now().Add(askGrace))
	}()
	for {
		var m fromServer
		if err := readFrame(conn, maxAssignmentBytes, &m); err != nil {
			if ctx.Err() != nil {
				return Assignment{}, fmt.Errorf("rendezvous at %s: %w while waiting for the other workers (the server did not say which are missing)", addr, ctx.Err())
			}
			return Assignment{}, fmt.Errorf("rendezvous at %s: the server closed the connection before the assignment: %w", addr, err)
		}
		switch {
		case m.Assignment != nil:
			a := *m.Assignment
			a.Members = m.Members
			if len(a.Members) != a.Size || a.Rank < 0 || a.Rank >= a.Size || a.Members[a.Rank].Slot != me.Slot {
				return Assignment{}, fmt.Errorf("rendezvous: inconsistent assignment (rank %d of %d, %d members)", a.Rank, a.Size, len(a.Members))
			}
			return a, nil
		case m.Error != "":
			return Assignment{}, errors.New(m.Error)
		case m.Reason != "":
			return Assignment{}, &MissingError{Missing: m.Missing, Size: m.Size, Reason: m.Reason}
		case len(m.Missing) > 0: // the answer to the question above
			return Assignment{}, &MissingError{Missing: m.Missing, Size: m.Size, Reason: "timed out", Cause: ctx.Err()}
		}
	}
}

// dial connects to addr and runs the handshake, retrying until ctx ends
// while the server cannot be reached.
func dial(ctx context.Context, d Dialer, addr string, key []byte) (net.Conn, error) {
	pause := 20 * time.Millisecond
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			timeout := HandshakeTimeout
			if dl, ok := ctx.Deadline(); ok {
				timeout = min(timeout, max(time.Until(dl), time.Millisecond))
			}
			err = secret.Handshake(conn, key, secret.Dialer, timeout)
			if err == nil {
				return conn, nil
			}
			conn.Close()
			if errors.Is(err, secret.ErrRefused) {
				return nil, fmt.Errorf("rendezvous at %s: %w (is GOHOROVOD_SECRET the job's?)", addr, err)
			}
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("rendezvous: cannot reach the server at %s: %w (last attempt: %v)", addr, ctx.Err(), err)
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}
