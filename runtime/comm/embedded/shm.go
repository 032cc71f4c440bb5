package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gohorovod/gohorovod/tensor"
)

// Shared memory between ranks on one host.
//
// Two ranks joined by a Unix socket move large payloads through rings of
// shared memory, one per direction, each made by its sender the first time
// it sends a payload above shmMin to that peer: a pair that never sends one
// (the partners of a small allreduce, say) never has a ring, and one that
// sends only one way has one ring. A ring is an anonymous memory file
// (memfd_create), never a name in /dev/shm: its descriptor travels to the
// receiver over the socket itself (SCM_RIGHTS, with a frameShmRing frame
// that gives the slot size), both sides map it and close the descriptor,
// and the memory goes away with the last mapping, so no crash, at any
// moment, can leave anything behind. A ring has shmSlots slots whose size
// fits the first payload (a power of two from shmSlotMin to shmSlotMax); a
// later, larger payload makes a larger ring that replaces it (frames are
// ordered, so the receiver has finished with the old slots when it reads
// the new ring's frame).
//
// A data frame larger than shmMin then goes out as a frameShm frame: its
// header still travels on the socket (with the call number, fingerprint and
// length the receiver checks), but its payload is copied, one slot at a
// time, into the ring, and each filled slot is announced by an 8-byte token
// on the socket (the slot's sequence number). The receiver's reader reads
// the token, copies the slot into the receive buffer (or, for a piece of
// the ring's reduce-scatter, reduces it straight into the reduced buffer)
// and publishes how many slots it has consumed; a sender that finds the
// ring full sleeps on that counter (a futex) until the receiver frees a
// slot, or until its connection is lost or closed.
//
// So the socket stays the channel that orders everything and that reveals
// a dead peer: a receiver waiting for a slot waits in a socket read, which
// fails when the peer's process dies; a sender waiting for a free slot
// wakes at least every shmPoll to look at its connection, which its own
// reader fails when the peer dies. Where a ring cannot be made the pair
// keeps its socket for that direction (Config.Logf says why).
const (
	shmMin     = 64 << 10  // payloads above this use a ring
	shmSlotMin = 64 << 10  // the smallest slot
	shmSlotMax = 512 << 10 // the largest slot
	shmSlots   = 4         // slots per ring (a power of two)
	shmHdr     = 4096      // per ring: the consumed counter and the waiting flag
	shmPoll    = 20 * time.Millisecond
	shmName    = "gohorovod-ring" // the memory file's name, as /proc shows it
)

// shmRingLen is the size of a ring with slots of slot bytes.
func shmRingLen(slot int) int { return shmHdr + shmSlots*slot }

// shmSlotFor returns the slot size of a ring made for a payload of n
// bytes: the power of two from shmSlotMin up that holds it, at most
// shmSlotMax.
func shmSlotFor(n int) int {
	s := shmSlotMin
	for s < n && s < shmSlotMax {
		s <<= 1
	}
	return s
}

// validSlot reports whether a peer's announced slot size is one that
// shmSlotFor can return.
func validSlot(s int) bool {
	return s >= shmSlotMin && s <= shmSlotMax && s&(s-1) == 0
}

// shmRing is one side's view of one ring: the sender's (count is slots
// produced) or the receiver's (count is slots consumed).
type shmRing struct {
	mem      []byte
	consumed *uint32 // slots the receiver has consumed (wrapping)
	waiting  *uint32 // non-zero while the sender sleeps on consumed
	slots    []byte
	slotSize int
	count    uint32
}

func newShmRing(mem []byte, slot int) *shmRing {
	return &shmRing{
		mem:      mem,
		consumed: (*uint32)(unsafe.Pointer(&mem[0])),
		waiting:  (*uint32)(unsafe.Pointer(&mem[64])),
		slots:    mem[shmHdr:shmRingLen(slot)],
		slotSize: slot,
	}
}

func (v *shmRing) slot(i uint32) []byte {
	o := int(i%shmSlots) * v.slotSize
	return v.slots[o : o+v.slotSize]
}

// unmap releases this side's mapping (nil: nothing).
func (v *shmRing) unmap() {
	if v != nil {
		shmUnmap(v.mem)
	}
}

// errShmClosed ends a sender's wait for a free slot when its connection
// closes.
var errShmClosed = errors.New("connection closed")

// shmCreateHook, when set (by tests), replaces shmCreate.
var shmCreateHook func(size int) (fd int, mem []byte, err error)

// shmTestHook, when set (by tests, before any group is made), runs after
// each slot a writer announces.
var shmTestHook func(c *conn)

// ringFor reports whether s's payload goes through a ring, making one (or
// a larger one) first when it needs one: a data frame above shmMin on a
// Unix socket whose rings have not failed. An error is the socket's.
func (c *conn) ringFor(s *sendReq, scratch []byte) (bool, error) {
	n := len(s.buf)
	if c.unix == nil || c.txOff || n <= shmMin || s.hdr[0] != frameData {
		return false, nil
	}
	if c.tx != nil && c.tx.slotSize >= shmSlotFor(n) {
		return true, nil
	}
	return c.sendRing(n, scratch)
}

// sendRing makes a ring for payloads of n bytes and sends it to the peer.
// It returns false when no ring could be made (the payload then goes on
// the socket, and so do later ones), an error when the socket failed.
func (c *conn) sendRing(n int, scratch []byte) (bool, error) {
	slot := shmSlotFor(n)
	create := shmCreate
	if shmCreateHook != nil {
		create = shmCreateHook
	}
	fd, mem, err := create(shmRingLen(slot))
	if err != nil {
		c.txOff = true
		if lf := c.m.cfg.Logf; lf != nil {
			lf("embedded: rank %d: no shared memory to rank %d, using the Unix socket: %v", c.m.rank, c.peer, err)
		}
		return false, nil
	}
	var hdr [hdrLen]byte
	putHeader(&hdr, frameShmRing, 0, 0, 0, 8)
	msg := append(scratch[:0], hdr[:]...)
	msg = binary.LittleEndian.AppendUint32(msg, uint32(slot))
	msg = binary.LittleEndian.AppendUint32(msg, shmSlots)
	err = sendFD(c.unix, msg, fd)
	closeFD(fd)
	if err != nil {
		shmUnmap(mem)
		return false, err
	}
	c.tx.unmap()
	c.tx = newShmRing(mem, slot)
	return true, nil
}

// ringFrame maps the ring a peer sent (frameShmRing): the descriptor came
// with the frame's bytes.
func (c *conn) ringFrame(f *frameHeader) error {
	if f.n != 8 {
		return fmt.Errorf("protocol error: a ring frame of %d bytes", f.n)
	}
	var b [8]byte
	if _, err := io.ReadFull(c.br, b[:]); err != nil {
		return err
	}
	slot, slots := int(binary.LittleEndian.Uint32(b[:])), binary.LittleEndian.Uint32(b[4:])
	if !validSlot(slot) || slots != shmSlots {
		return fmt.Errorf("protocol error: a ring of %d slots of %d bytes", slots, slot)
	}
	fd, ok := c.fdr.pop()
	if !ok {
		return errors.New("protocol error: a ring frame without its descriptor")
	}
	mem, err := shmMap(fd, shmRingLen(slot))
	closeFD(fd)
	if err != nil {
		return fmt.Errorf("mapping the shared memory rank %d sent: %w", c.peer, err)
	}
	c.rx.unmap()
	c.rx = newShmRing(mem, slot)
	return nil
}

// waitFree waits until the sender's ring has a free slot, or c is lost or
// closed.
func (c *conn) waitFree() error {
	v := c.tx
	for {
		cons := atomic.LoadUint32(v.consumed)
		if v.count-cons < shmSlots {
			return nil
		}
		atomic.StoreUint32(v.waiting, 1)
		cons = atomic.LoadUint32(v.consumed)
		if v.count-cons < shmSlots {
			atomic.StoreUint32(v.waiting, 0)
			return nil
		}
		futexWait(v.consumed, cons, shmPoll)
		atomic.StoreUint32(v.waiting, 0)
		if err := c.gone(); err != nil {
			return err
		}
		select {
		case <-c.closed:
			return errShmClosed
		default:
		}
	}
}

// writeShm sends s's payload through the ring, announcing each slot on the
// socket; the header goes with the first token.
func (c *conn) writeShm(hdr *[hdrLen]byte, b, scratch []byte) error {
	v := c.tx
	first := true
	for len(b) > 0 {
		if err := c.waitFree(); err != nil {
			return err
		}
		k := copy(v.slot(v.count), b)
		b = b[k:]
		msg := scratch[:0]
		if first {
			msg = append(msg, hdr[:]...)
			first = false
		}
		msg = binary.LittleEndian.AppendUint64(msg, uint64(v.count))
		v.count++
		if _, err := c.nc.Write(msg); err != nil {
			return err
		}
		if shmTestHook != nil {
			shmTestHook(c)
		}
	}
	return nil
}

// readShm receives a frameShm payload of n bytes into dst (nil: discard
// it), slot by slot: copied, or, with red set, reduced with red's dtype and
// op (tensor.Reduce(dst piece, slot)) straight from the slot, which saves
// copying it out and reading it again. A slot is freed once that is done.
func (c *conn) readShm(dst []byte, n int, red *recvReq) error {
	v := c.rx
	if v == nil {
		return errors.New("protocol error: a shared-memory frame without shared memory")
	}
	tok := c.tok[:]
	for off := 0; off < n; {
		if _, err := io.ReadFull(c.br, tok); err != nil {
			return err
		}
		if got := uint32(binary.LittleEndian.Uint64(tok)); got != v.count {
			return fmt.Errorf("protocol error: shared-memory slot %d announced, %d expected", got, v.count)
		}
		k := min(n-off, v.slotSize)
		switch {
		case red != nil:
			tensor.Reduce(red.dt, red.op, dst[off:off+k], v.slot(v.count)[:k])
		case dst != nil:
			copy(dst[off:off+k], v.slot(v.count))
		}
		off += k
		v.count++
		atomic.StoreUint32(v.consumed, v.count)
		if atomic.LoadUint32(v.waiting) != 0 {
			futexWake(v.consumed)
		}
	}
	return nil
}
