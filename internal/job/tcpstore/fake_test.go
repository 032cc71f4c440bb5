package tcpstore

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
)

// fakeTorch2 is a TCPStore server written from torch 2's protocol: every
// connection must open with VALIDATE and the magic number, or it is
// closed; queries are numbered with VALIDATE as 0; PING (when ping is set)
// echoes its nonce, and otherwise, like any unknown query, closes the
// connection. Numbers are in the host's byte order, strings and vectors
// are a uint64 length and the bytes.
type fakeTorch2 struct {
	ping bool
	// badEcho, when set, makes PING answer the nonce plus one.
	badEcho bool

	l    net.Listener
	mu   sync.Mutex
	cond *sync.Cond
	kv   map[string][]byte
	// validated counts connections that passed VALIDATE; refused those
	// that were closed for not opening with it.
	validated, refused int
	closed             bool
	wg                 sync.WaitGroup
}

func startFakeTorch2(t *testing.T, ping bool) *fakeTorch2 {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeTorch2{ping: ping, l: l, kv: map[string][]byte{"/py/hello": []byte("from python")}}
	s.cond = sync.NewCond(&s.mu)
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(s.close)
	return s
}

func (s *fakeTorch2) addr() string { return s.l.Addr().String() }

func (s *fakeTorch2) close() {
	s.l.Close()
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	s.wg.Wait()
}

// value waits for a key, as torch's own store.get does, and reads it by
// the name torch's own clients give it.
func (s *fakeTorch2) value(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.closed {
		if v, ok := s.kv["/"+key]; ok {
			return string(v)
		}
		s.cond.Wait()
	}
	return ""
}

func (s *fakeTorch2) serve() {
	defer s.wg.Done()
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			s.conn(bufio.NewReader(c), c)
		}()
	}
}

// conn serves one connection until it ends or breaks the protocol.
func (s *fakeTorch2) conn(r *bufio.Reader, w io.Writer) {
	q, err := r.ReadByte()
	var magic [4]byte
	if err != nil || q != queryValidate {
		s.count(&s.refused)
		return
	}
	if _, err := io.ReadFull(r, magic[:]); err != nil || binary.NativeEndian.Uint32(magic[:]) != validationMagic {
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

func (s *fakeTorch2) count(n *int) {
	s.mu.Lock()
	*n++
	s.mu.Unlock()
}

// query answers one query; false ends the connection.
func (s *fakeTorch2) query(q byte, r *bufio.Reader, w io.Writer) bool {
	d := torch2
	switch q {
	case queryPing:
		var n [4]byte
		if !s.ping || readFull(r, n[:]) != nil {
			return false
		}
		v := binary.NativeEndian.Uint32(n[:])
		if s.badEcho {
			v++
		}
		return write(w, binary.NativeEndian.AppendUint32(nil, v))
	case d.set:
		k, v := readStr(r), readStr(r)
		if k == nil || v == nil {
			return false
		}
		s.mu.Lock()
		s.kv[string(k)] = v
		s.cond.Broadcast()
		s.mu.Unlock()
		return true
	case d.get:
		k := readStr(r)
		s.mu.Lock()
		v, ok := s.kv[string(k)]
		s.mu.Unlock()
		return k != nil && ok && write(w, request(nil).bytes(v))
	case d.add:
		return s.addQuery(r, w)
	case d.check, d.wait:
		return s.keysQuery(q == d.wait, r, w)
	case d.compareSet:
		return s.compareSet(r, w)
	case d.numKeys:
		s.mu.Lock()
		n := len(s.kv)
		s.mu.Unlock()
		return write(w, binary.NativeEndian.AppendUint64(nil, uint64(n)))
	case d.deleteKey:
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

func (s *fakeTorch2) addQuery(r *bufio.Reader, w io.Writer) bool {
	k := readStr(r)
	var b [8]byte
	if k == nil || readFull(r, b[:]) != nil {
		return false
	}
	s.mu.Lock()
	old, _ := strconv.ParseInt(string(s.kv[string(k)]), 10, 64)
	sum := old + int64(binary.NativeEndian.Uint64(b[:]))
	s.kv[string(k)] = []byte(strconv.FormatInt(sum, 10))
	s.cond.Broadcast()
	s.mu.Unlock()
	return write(w, binary.NativeEndian.AppendUint64(nil, uint64(sum)))
}

// keysQuery answers CHECK at once, and WAIT once every key is set.
func (s *fakeTorch2) keysQuery(wait bool, r *bufio.Reader, w io.Writer) bool {
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
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		all := true
		for _, k := range keys {
			_, ok := s.kv[k]
			all = all && ok
		}
		switch {
		case all:
			return write(w, []byte{0})
		case !wait:
			return write(w, []byte{1})
		case s.closed:
			return false
		}
		s.cond.Wait()
	}
}

func (s *fakeTorch2) compareSet(r *bufio.Reader, w io.Writer) bool {
	k, expected, desired := readStr(r), readStr(r), readStr(r)
	if k == nil || expected == nil || desired == nil {
		return false
	}
	s.mu.Lock()
	v, ok := s.kv[string(k)]
	switch {
	case !ok && len(expected) == 0, ok && string(v) == string(expected):
		s.kv[string(k)] = desired
		v = desired
		s.cond.Broadcast()
	case !ok:
		v = expected
	}
	s.mu.Unlock()
	return write(w, request(nil).bytes(v))
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
