package rendezvous

import (
	"encoding/binary"
	"encoding/json"
	"net"
	"sync"
	"time"
)

// answerWriters bounds the goroutines that write a completed rendezvous'
// answers: enough that a few slow or stopped workers (each holding one
// until its write deadline) do not hold up the others, few enough that a
// job of 10,000 does not start 10,000 more goroutines at once.
const answerWriters = 256

// answerBytesPerSecond is the slowest rate a worker is allowed to read
// its answer at: each answer's write deadline is writeTimeout plus its
// size at this rate, since an answer carries every member of the job.
const answerBytesPerSecond = 1 << 20

// answerSendBuffer is the send buffer of a connection while its answer is
// written. A write returns once its bytes are in the kernel, and the
// default buffers grow to 4 MB a connection: with answers of 800 KB (a
// job of 10,000), the writers would pass the whole 8 GB of answers to the
// kernel, far beyond its memory for TCP (tcp_mem), and the host's TCP
// would drop segments, stall and time out. With this buffer a writer
// waits for its worker to read, and the kernel holds at most
// answerWriters times it (twice that with the kernel's bookkeeping).
const answerSendBuffer = 64 << 10

// answers holds the encoding of a completed rendezvous' member list,
// made once and shared by every worker's answer: a worker's frame is its
// own small head (the frame's length, its assignment) followed by these
// bytes, written with writev. Encoding the list for each worker instead
// costs the server O(n) memory and time per worker, O(n^2) in all:
// 850 MiB of heap for 2,000 workers.
type answers struct {
	members []byte // `,"members":[...]}`: the rest of every frame
}

// newAnswers encodes the member list: slots[i] with peers[i]'s payload.
func newAnswers(peers []*peer, slots []Slot) answers {
	members := make([]Member, len(peers))
	for i, p := range peers {
		members[i] = Member{Slot: slots[i], Data: p.member.Data}
	}
	raw, err := json.Marshal(members)
	if err != nil { // strings and ints only: cannot happen
		panic("rendezvous: " + err.Error())
	}
	tail := make([]byte, 0, len(raw)+len(`,"members":}`))
	tail = append(append(append(tail, `,"members":`...), raw...), '}')
	return answers{members: tail}
}

// frame is the frame that tells a worker a: a toWorker with Assignment
// and MembersJSON set, as writeFrame would encode it.
func (as answers) frame(a Assignment) net.Buffers {
	head, err := json.Marshal(a)
	if err != nil {
		panic("rendezvous: " + err.Error())
	}
	buf := make([]byte, 4, 4+len(`{"assignment":`)+len(head))
	buf = append(append(buf, `{"assignment":`...), head...)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4+len(as.members)))
	return net.Buffers{buf, as.members}
}

// sendFrame writes a frame built by answers.frame, one writer at a time,
// within a deadline that grows with its size.
func (p *peer) sendFrame(b net.Buffers) error {
	size := 0
	for _, s := range b {
		size += len(s)
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if c, ok := p.conn.(interface{ SetWriteBuffer(int) error }); ok && size > answerSendBuffer {
		_ = c.SetWriteBuffer(answerSendBuffer)
	}
	_ = p.conn.SetWriteDeadline(time.Now().Add(writeTimeout + time.Duration(size)*time.Second/answerBytesPerSecond))
	_, err := b.WriteTo(p.conn)
	return err
}

// sendAssignments sends every peer of a completed rendezvous its
// assignment in plan (with round) and the member list: slots in rank
// order with each peer's payload. The list is encoded once (answers), and
// at most answerWriters answers are written at a time.
func sendAssignments(peers []*peer, slots []Slot, plan []Assignment, round int, logf func(string, ...any)) {
	as := newAnswers(peers, slots)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(answerWriters, len(peers)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				a := plan[i]
				a.Round = round
				if err := peers[i].sendFrame(as.frame(a)); err != nil && logf != nil {
					logf("rendezvous: sending rank %d (%v) its assignment (round %d): %v", i, peers[i].member.Slot, round, err)
				}
			}
		}()
	}
	for i := range peers {
		next <- i
	}
	close(next)
	wg.Wait()
}
