package tcpstoretest

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
)

// torch 2's query numbers (TCPStoreBackend.hpp): VALIDATE first, every
// other query one above its torch 1.x number.
const (
	qValidate   byte = 0
	qSet        byte = 1
	qCompareSet byte = 2
	qGet        byte = 3
	qAdd        byte = 4
	qCheck      byte = 5
	qWait       byte = 6
	qNumKeys    byte = 7
	qDeleteKey  byte = 8
	qPing       byte = 13
)

// Magic is the number that follows VALIDATE.
const Magic uint32 = 0x3C85F7CE

// Torch2 is a TCPStore server written from torch 2's protocol: every
// connection must open with VALIDATE and the magic number, or it is
// closed; queries are numbered with VALIDATE as 0; PING (when the server
// answers it) echoes its nonce, and otherwise, like any unknown query,
// closes the connection. Numbers are in the host's byte order, strings
// and vectors are a uint64 length and the bytes. It holds "/py/hello" =
// "from python" from the start, as a key torch's own client set.
type Torch2 struct {
	ping bool
	// BadEcho, when set before a client connects, makes PING answer the
	// nonce plus one.
	BadEcho bool

	l                  net.Listener
	mu                 sync.Mutex
	kv                 map[string][]byte
	waiting            map[string][]*waiter // by key not yet set
	validated, refused int
	closed             bool
	done               chan struct{} // closed by Close
	conns              map[net.Conn]bool
	wg                 sync.WaitGroup
}

// waiter is one WAIT (or Value) for keys not all set: ready is closed
// when the last of them is. Each key wakes only its own waiters, as
// torch's server does: a condition broadcast to every waiting
// connection on every SET would cost O(n) wake-ups per rank that
// arrives, O(n^2) in a job of n.
type waiter struct {
	missing int
	ready   chan struct{}
}

// Start serves a Torch2 store on a free port of 127.0.0.1; ping: it
// answers PING (torch 2.4 and later), else it closes a connection that
// sends it (a validating server before PING).
func Start(ping bool) (*Torch2, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Torch2{ping: ping, l: l, kv: map[string][]byte{"/py/hello": []byte("from python")},
		waiting: map[string][]*waiter{}, done: make(chan struct{}), conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// Addr is the server's "host:port".
func (s *Torch2) Addr() string { return s.l.Addr().String() }

// Counts returns the connections that opened with VALIDATE and the
// magic number, and those closed for not doing so.
func (s *Torch2) Counts() (validated, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validated, s.refused
}

// Close stops the server, ends its connections and waits for them.
func (s *Torch2) Close() {
	s.l.Close()
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Value waits for a key, as torch's own store.get does, and reads it by
// the name torch's own clients give it ("/" and key); "" once the server
// is closed.
func (s *Torch2) Value(key string) string {
	if !s.await([]string{"/" + key}) {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.kv["/"+key])
}

// await waits until every key is set (true) or the server is closed
// (false).
func (s *Torch2) await(keys []string) bool {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys) // a key named twice is waited for once
	s.mu.Lock()
	w := &waiter{ready: make(chan struct{})}
	for _, k := range keys {
		if _, ok := s.kv[k]; !ok {
			s.waiting[k] = append(s.waiting[k], w)
			w.missing++
		}
	}
	missing := w.missing
	s.mu.Unlock()
	if missing == 0 {
		return true
	}
	select {
	case <-w.ready:
		return true
	case <-s.done:
		return false
	}
}

// setLocked stores v under k and wakes the waiters that were missing
// only k. s.mu is held.
func (s *Torch2) setLocked(k string, v []byte) {
	if _, ok := s.kv[k]; !ok {
		for _, w := range s.waiting[k] {
			if w.missing--; w.missing == 0 {
				close(w.ready)
			}
		}
		delete(s.waiting, k)
	}
	s.kv[k] = v
}

func (s *Torch2) serve() {
	defer s.wg.Done()
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.conn(bufio.NewReader(c), c)
			c.Close()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// conn serves one connection until it ends or breaks the protocol.
func (s *Torch2) conn(r *bufio.Reader, w io.Writer) {
	q, err := r.ReadByte()
	var magic [4]byte
	if err != nil || q != qValidate {
		s.count(&s.refused)
		return
	}
	if _, err := io.ReadFull(r, magic[:]); err != nil || binary.NativeEndian.Uint32(magic[:]) != Magic {
		s.count(&s.refused)
		return
	}
	s.count(&s.validated)
	for {
		q, err := r.ReadByte()
		if err != nil || !s.query(q, r, w) {
			return
		}
	}
}

func (s *Torch2) count(n *int) {
	s.mu.Lock()
	*n++
	s.mu.Unlock()
}

// query answers one query; false ends the connection.
func (s *Torch2) query(q byte, r *bufio.Reader, w io.Writer) bool {
	switch q {
	case qPing:
		var n [4]byte
		if !s.ping || readFull(r, n[:]) != nil {
			return false
		}
		v := binary.NativeEndian.Uint32(n[:])
		if s.BadEcho {
			v++
		}
		return write(w, binary.NativeEndian.AppendUint32(nil, v))
	case qSet:
		k, v := readStr(r), readStr(r)
		if k == nil || v == nil {
			return false
		}
		s.mu.Lock()
		s.setLocked(string(k), v)
		s.mu.Unlock()
		return true
	case qGet:
		k := readStr(r)
		s.mu.Lock()
		v, ok := s.kv[string(k)]
		s.mu.Unlock()
		return k != nil && ok && write(w, vector(v))
	case qAdd:
		return s.addQuery(r, w)
	case qCheck, qWait:
		return s.keysQuery(q == qWait, r, w)
	case qCompareSet:
		return s.compareSet(r, w)
	case qNumKeys:
		s.mu.Lock()
		n := len(s.kv)
		s.mu.Unlock()
		return write(w, binary.NativeEndian.AppendUint64(nil, uint64(n)))
	case qDeleteKey:
		k := readStr(r)
		s.mu.Lock()
		_, ok := s.kv[string(k)]
		delete(s.kv, string(k))
		s.mu.Unlock()
		n := uint64(0)
		if ok {
			n = 1
		}
		return k != nil && write(w, binary.NativeEndian.AppendUint64(nil, n))
	}
	return false
}

func (s *Torch2) addQuery(r *bufio.Reader, w io.Writer) bool {
	k := readStr(r)
	var b [8]byte
	if k == nil || readFull(r, b[:]) != nil {
		return false
	}
	s.mu.Lock()
	old, _ := strconv.ParseInt(string(s.kv[string(k)]), 10, 64)
	sum := old + int64(binary.NativeEndian.Uint64(b[:]))
	s.setLocked(string(k), []byte(strconv.FormatInt(sum, 10)))
	s.mu.Unlock()
	return write(w, binary.NativeEndian.AppendUint64(nil, uint64(sum)))
}

// keysQuery answers CHECK at once, and WAIT once every key is set.
func (s *Torch2) keysQuery(wait bool, r *bufio.Reader, w io.Writer) bool {
	var b [8]byte
	if readFull(r, b[:]) != nil {
		return false
	}
	keys := make([]string, binary.NativeEndian.Uint64(b[:])&0xffff)
	for i := range keys {
		k := readStr(r)
		if k == nil {
			return false
		}
		keys[i] = string(k)
	}
	if !wait {
		s.mu.Lock()
		all := true
		for _, k := range keys {
			_, ok := s.kv[k]
			all = all && ok
		}
		s.mu.Unlock()
		if !all {
			return write(w, []byte{1})
		}
		return write(w, []byte{0})
	}
	return s.await(keys) && write(w, []byte{0})
}

func (s *Torch2) compareSet(r *bufio.Reader, w io.Writer) bool {
	k, expected, desired := readStr(r), readStr(r), readStr(r)
	if k == nil || expected == nil || desired == nil {
		return false
	}
	s.mu.Lock()
	v, ok := s.kv[string(k)]
	switch {
	case !ok && len(expected) == 0, ok && string(v) == string(expected):
		s.setLocked(string(k), desired)
		v = desired
	case !ok:
		v = expected
	}
	s.mu.Unlock()
	return write(w, vector(v))
}

func readFull(r io.Reader, b []byte) error { _, err := io.ReadFull(r, b); return err }

// readStr reads a length and that many bytes; nil on a broken request.
func readStr(r io.Reader) []byte {
	var b [8]byte
	if readFull(r, b[:]) != nil {
		return nil
	}
	n := binary.NativeEndian.Uint64(b[:])
	if n > 1<<20 {
		return nil
	}
	v := make([]byte, n)
	if readFull(r, v) != nil {
		return nil
	}
	return v
}

func write(w io.Writer, b []byte) bool { _, err := w.Write(b); return err == nil }

// vector encodes a value: its length and its bytes.
func vector(v []byte) []byte {
	return append(binary.NativeEndian.AppendUint64(nil, uint64(len(v))), v...)
}
