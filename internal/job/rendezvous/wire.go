package rendezvous

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
)

// Frame limits: a join carries one worker's payload; an assignment carries
// every member's.
const (
	maxJoinBytes       = 1 << 20
	maxAssignmentBytes = 256 << 20
)

// toServer is a message from a worker: its join, or (after its own
// deadline) the question which slots are still missing.
type toServer struct {
	Join    *Member `json:"join,omitempty"`
	Missing bool    `json:"missing,omitempty"`
	// Elastic marks the join of a worker of an elastic job (JoinRound),
	// and Last is the round it was last a member of (0: none yet).
	Elastic bool `json:"elastic,omitempty"`
	Last    int  `json:"last,omitempty"`
	// Frozen, sent on an elastic worker's session after its join, reports
	// a member of its round that the job declared frozen (alive, but
	// silent on the heartbeat channel), for the launcher to stop.
	Frozen *Slot `json:"frozen,omitempty"`
}

// toWorker is a message from the server: exactly one field is set.
type toWorker struct {
	// Error refuses the join.
	Error string `json:"error,omitempty"`
	// Missing (with Size) lists the slots that have not joined: the
	// answer to a worker's question, or, with Reason, the end of a
	// rendezvous that failed.
	Missing []Slot `json:"missing,omitempty"`
	Size    int    `json:"size,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Assignment is the answer once everyone has joined; Members are sent
	// once for all workers (MembersJSON) and filled in by the worker.
	Assignment  *Assignment     `json:"assignment,omitempty"`
	MembersJSON json.RawMessage `json:"members,omitempty"`
	// Removed tells an elastic worker that the new round has no place for
	// it (RoundServer.StartRound).
	Removed bool `json:"removed,omitempty"`
	// Update is a host update for the coordinator of an elastic job
	// (RoundServer.Notify), sent after its assignment.
	Update *HostUpdate `json:"update,omitempty"`
}

// fromServer is how a worker reads a toWorker: the member list is decoded
// in the same pass as the rest (Members, the shallower field, takes the
// name "members" from toWorker.MembersJSON), not kept raw and decoded
// again, since it is the bulk of the frame: about 80 bytes a member, 800
// KB in a job of 10,000.
type fromServer struct {
	toWorker
	Members []Member `json:"members,omitempty"`
}

func writeFrame(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	_, err = w.Write(append(buf, body...))
	return err
}

// bigFrame is the size from which reading and decoding a frame takes one
// of decodeSlots: an answer of a large job (800 KB at 10,000 workers,
// and 2 MB once decoded). Decoding is CPU-bound, so more at once than
// the process has CPUs adds only memory: a process that runs many
// workers (tests, a load generator) would hold every answer at once. A
// worker's own process reads one.
const bigFrame = 64 << 10

var decodeSlots = make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))

func readFrame(r io.Reader, max int, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(max) {
		return fmt.Errorf("rendezvous: message of %d bytes (at most %d)", n, max)
	}
	if n >= bigFrame {
		decodeSlots <- struct{}{}
		defer func() { <-decodeSlots }()
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("rendezvous: malformed message: %w", err)
	}
	return nil
}
