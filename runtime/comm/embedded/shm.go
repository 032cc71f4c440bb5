package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gohorovod/gohorovod/tensor"
)

// Shared memory between ranks on one host.
//
// Two ranks joined by a Unix socket also share a mapped file in /dev/shm
// holding two rings, one per direction, each of shmSlots slots of
// shmSlotSize bytes. A data frame larger than shmMin goes out as a
// frameShm frame: its header still travels on the socket (with the call
// number, fingerprint and length the receiver checks), but its payload is
// copied, one slot at a time, into the ring, and each filled slot is
// announced by an 8-byte token on the socket (the slot's sequence
// number). The receiver's reader reads the token, copies the slot into the
// receive buffer (or, for a piece of the ring's reduce-scatter, reduces it
// straight into the reduced buffer) and publishes how many slots it has
// consumed; a sender that finds the ring full sleeps on that counter (a
// futex) until the receiver frees a slot, or until its connection is lost
// or closed.
//
// So the socket stays the channel that orders everything and that reveals
// a dead peer: a receiver waiting for a slot waits in a socket read, which
// fails when the peer's process dies; a sender waiting for a free slot
// wakes at least every shmPoll to look at its connection, which its own
// reader fails when the peer dies. The dialer creates the file, the
// acceptor maps it and says so, and the dialer unlinks it at once: from
// then on only the two mappings hold it, and a crash leaves nothing in
// /dev/shm. The mappings are unmapped when the mesh is torn down.
const (
	shmMin      = 64 << 10  // payloads above this use the ring
	shmSlotSize = 512 << 10 // bytes per slot
	shmSlots    = 4         // slots per ring (a power of two)
	shmHdr      = 4096      // per ring: the consumed counter and the waiting flag
	shmRing     = shmHdr + shmSlots*shmSlotSize
	shmFile     = 2 * shmRing
	shmPoll     = 20 * time.Millisecond
	shmPrefix   = "gohorovod-"
)

// shmDir holds the files (a variable for tests).
var shmDir = "/dev/shm"

// shmMagic opens the shared-memory offer that follows the hello on a Unix
// connection.
var shmMagic = [4]byte{'g', 'h', 's', 'm'}

// shmLink is one rank's view of the file it shares with one peer: the ring
// it sends on and the ring it receives on.
type shmLink struct {
	mem  []byte
	tx   shmRingView
	rx   shmRingView
	tok  [8]byte // the reader's token buffer
	once sync.Once
}

type shmRingView struct {
	consumed *uint32 // slots the receiver has consumed (wrapping)
	waiting  *uint32 // non-zero while the sender sleeps on consumed
	slots    []byte
	count    uint32 // this side's count: produced (tx) or consumed (rx)
}

func newShmLink(mem []byte, dialer bool) *shmLink {
	view := func(off int) shmRingView {
		return shmRingView{
			consumed: (*uint32)(unsafe.Pointer(&mem[off])),
			waiting:  (*uint32)(unsafe.Pointer(&mem[off+64])),
			slots:    mem[off+shmHdr : off+shmRing],
		}
	}
	a, b := view(0), view(shmRing)
	if dialer {
		return &shmLink{mem: mem, tx: a, rx: b}
	}
	return &shmLink{mem: mem, tx: b, rx: a}
}

func (l *shmLink) close() {
	if l == nil {
		return
	}
	l.once.Do(func() { shmUnmap(l.mem) })
}

func (v *shmRingView) slot(i uint32) []byte {
	o := int(i%shmSlots) * shmSlotSize
	return v.slots[o : o+shmSlotSize]
}

// errShmClosed ends a sender's wait for a free slot when its connection
// closes.
var errShmClosed = errors.New("connection closed")

// waitFree waits until the sender's ring has a free slot, or c is lost or
// closed.
func (c *conn) waitFree() error {
	v := &c.shm.tx
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
	v := &c.shm.tx
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

// shmTestHook, when set (by tests, before any group is made), runs after
// each slot a writer announces.
var shmTestHook func(c *conn)

// readShm receives a frameShm payload of n bytes into dst (nil: discard
// it), slot by slot: copied, or, with red set, reduced with red's dtype and
// op (tensor.Reduce(dst piece, slot)) straight from the slot, which saves
// copying it out and reading it again. A slot is freed once that is done.
func (c *conn) readShm(dst []byte, n int, red *recvReq) error {
	v := &c.shm.rx
	tok := c.shm.tok[:]
	for off := 0; off < n; {
		if _, err := io.ReadFull(c.br, tok); err != nil {
			return err
		}
		if got := uint32(binary.LittleEndian.Uint64(tok)); got != v.count {
			return fmt.Errorf("protocol error: shared-memory slot %d announced, %d expected", got, v.count)
		}
		k := min(n-off, shmSlotSize)
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

// setupShm offers (dialer) or accepts (acceptor) shared memory on each Unix
// connection, in parallel, and returns the links (nil where there is none).
// A rank that cannot create or map the file says so through logf and the
// pair keeps using its socket; a connection that fails the exchange fails
// New.
func setupShm(nets []net.Conn, me int, logf func(string, ...any)) ([]*shmLink, error) {
	links := make([]*shmLink, len(nets))
	errs := make([]error, len(nets))
	var wg sync.WaitGroup
	for p, nc := range nets {
		if _, ok := nc.(*net.UnixConn); !ok {
			continue
		}
		wg.Go(func() {
			nc.SetDeadline(time.Now().Add(handshakeTimeout))
			defer nc.SetDeadline(time.Time{})
			var why string
			if me > p {
				links[p], why, errs[p] = offerShm(nc)
			} else {
				links[p], why, errs[p] = acceptShm(nc)
			}
			if errs[p] != nil {
				errs[p] = fmt.Errorf("embedded: rank %d: setting up shared memory with rank %d: %w", me, p, errs[p])
			} else if links[p] == nil && logf != nil {
				logf("embedded: rank %d: no shared memory with rank %d, using the Unix socket: %s", me, p, why)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, l := range links {
			l.close()
		}
		return nil, err
	}
	return links, nil
}

// offerShm is the dialer's side: create and map the file, send its name
// ("" when that failed), read whether the peer mapped it, unlink it.
func offerShm(nc net.Conn) (*shmLink, string, error) {
	name, mem, cerr := shmCreate()
	msg := append(shmMagic[:0:0], shmMagic[:]...)
	msg = binary.LittleEndian.AppendUint16(msg, uint16(len(name)))
	msg = append(msg, name...)
	_, err := nc.Write(msg)
	var ok [1]byte
	if err == nil && cerr == nil {
		_, err = io.ReadFull(nc, ok[:])
	}
	if name != "" {
		shmUnlink(name)
	}
	if err != nil || cerr != nil || ok[0] != 1 {
		if mem != nil {
			shmUnmap(mem)
		}
	}
	switch {
	case err != nil:
		return nil, "", err
	case cerr != nil:
		return nil, cerr.Error(), nil
	case ok[0] != 1:
		return nil, "the peer could not map " + name, nil
	}
	return newShmLink(mem, true), "", nil
}

// acceptShm is the acceptor's side: read the offer, map the file if there
// is one, and say whether that worked.
func acceptShm(nc net.Conn) (*shmLink, string, error) {
	var h [6]byte
	if _, err := io.ReadFull(nc, h[:]); err != nil {
		return nil, "", err
	}
	if [4]byte(h[:4]) != shmMagic {
		return nil, "", errors.New("protocol error: no shared-memory offer")
	}
	nb := make([]byte, binary.LittleEndian.Uint16(h[4:]))
	if _, err := io.ReadFull(nc, nb); err != nil {
		return nil, "", err
	}
	name := string(nb)
	if name == "" {
		return nil, "the peer could not create a file in " + shmDir, nil
	}
	var mem []byte
	merr := errors.New("not a shared-memory file name: " + name)
	if strings.HasPrefix(name, shmDir+"/"+shmPrefix) && !strings.Contains(name[len(shmDir)+1:], "/") {
		mem, merr = shmOpen(name)
	}
	reply := []byte{0}
	if merr == nil {
		reply[0] = 1
	}
	if _, err := nc.Write(reply); err != nil {
		if mem != nil {
			shmUnmap(mem)
		}
		return nil, "", err
	}
	if merr != nil {
		return nil, merr.Error(), nil
	}
	return newShmLink(mem, false), "", nil
}
