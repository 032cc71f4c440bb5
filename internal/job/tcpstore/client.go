package tcpstore

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The answers to CHECK and WAIT.
const (
	checkReady    byte = 0
	checkNotReady byte = 1
	waitStop      byte = 0
)

// keyPrefix is what torch's own clients put before every key, so that a
// key this client sets is the key torch's store.get sees.
const keyPrefix = "/"

// maxValue bounds the size of a value the client accepts from a server.
const maxValue = 64 << 20

// ErrTimeout is returned (wrapped) by Wait and Get when the keys did not
// all appear in time.
var ErrTimeout = errors.New("tcpstore: timed out waiting for keys")

// Client is one connection to a TCPStore server. Its methods must not be
// called concurrently.
type Client struct {
	conn net.Conn
	r    *bufio.Reader
	addr string
	d    dialect
}

// Dial connects to the server at addr ("host:port"), retrying until ctx
// ends, since the server may start after the worker. It first probes the
// server on connections of its own to learn whether it speaks torch 1.x's
// protocol or torch 2's, then opens the connection as that server
// expects (torch 2: VALIDATE, and PING where the server answers it).
func Dial(ctx context.Context, addr string) (*Client, error) {
	d, err := probe(ctx, addr)
	if err != nil {
		return nil, err
	}
	conn, err := dialRetry(ctx, addr)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, r: bufio.NewReader(conn), addr: addr, d: d}
	if err := c.open(); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// Protocol names the generation of torch's store the client found:
// "torch 1.x", "torch 2" (VALIDATE) or "torch 2 (ping)".
func (c *Client) Protocol() string { return c.d.name }

// open sends the handshake of the client's dialect on its connection
// and checks the echo of PING.
func (c *Client) open() error {
	nonce := pingNonce()
	r := handshake(c.d, nonce)
	if len(r) == 0 {
		return nil
	}
	if err := c.send(r, time.Now().Add(probeTimeout)); err != nil {
		return err
	}
	if !c.d.ping {
		return nil
	}
	var b [4]byte
	if _, err := io.ReadFull(c.r, b[:]); err != nil {
		return fmt.Errorf("tcpstore %s: PING: %w", c.addr, err)
	}
	if got := binary.NativeEndian.Uint32(b[:]); got != nonce {
		return fmt.Errorf("tcpstore %s: PING with nonce %#x was answered with %#x", c.addr, nonce, got)
	}
	return nil
}

// dialRetry connects to addr, retrying until ctx ends.
func dialRetry(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("tcpstore: no store answered at %s: %w", addr, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// request encodes one query.
type request []byte

func newRequest(q byte) request { return request{q} }

func (r request) str(s string) request {
	r = binary.LittleEndian.AppendUint64(r, uint64(len(s)))
	return append(r, s...)
}

func (r request) bytes(b []byte) request {
	r = binary.LittleEndian.AppendUint64(r, uint64(len(b)))
	return append(r, b...)
}

func (r request) u64(v uint64) request { return binary.LittleEndian.AppendUint64(r, v) }

func (c *Client) send(r request, deadline time.Time) error {
	c.conn.SetDeadline(deadline)
	if _, err := c.conn.Write(r); err != nil {
		return fmt.Errorf("tcpstore %s: %w", c.addr, err)
	}
	return nil
}

// Set stores value under key.
func (c *Client) Set(key string, value []byte) error {
	return c.send(newRequest(c.d.set).str(keyPrefix+key).bytes(value), time.Now().Add(30*time.Second))
}

// Add adds delta to the number stored under key (0 when absent) and
// returns the sum.
func (c *Client) Add(key string, delta int64) (int64, error) {
	dl := time.Now().Add(30 * time.Second)
	if err := c.send(newRequest(c.d.add).str(keyPrefix+key).u64(uint64(delta)), dl); err != nil {
		return 0, err
	}
	v, err := c.readU64()
	return int64(v), err
}

// Check reports whether every key is set, without waiting.
func (c *Client) Check(keys ...string) (bool, error) {
	r := newRequest(c.d.check).u64(uint64(len(keys)))
	for _, k := range keys {
		r = r.str(keyPrefix + k)
	}
	if err := c.send(r, time.Now().Add(30*time.Second)); err != nil {
		return false, err
	}
	b, err := c.r.ReadByte()
	if err != nil {
		return false, fmt.Errorf("tcpstore %s: %w", c.addr, err)
	}
	switch b {
	case checkReady:
		return true, nil
	case checkNotReady:
		return false, nil
	}
	return false, fmt.Errorf("tcpstore %s: answer %d to CHECK", c.addr, b)
}

// Wait returns once every key is set, or with an error wrapping
// ErrTimeout when ctx ends first. torch 1.x's servers cannot cancel a
// wait, so the connection is closed then.
func (c *Client) Wait(ctx context.Context, keys ...string) error {
	r := newRequest(c.d.wait).u64(uint64(len(keys)))
	for _, k := range keys {
		r = r.str(keyPrefix + k)
	}
	dl, _ := ctx.Deadline() // the zero time, no deadline, when ctx has none
	if err := c.send(r, time.Now().Add(30*time.Second)); err != nil {
		return err
	}
	c.conn.SetReadDeadline(dl)
	stop := context.AfterFunc(ctx, func() { c.conn.SetReadDeadline(time.Now()) })
	defer stop()
	b, err := c.r.ReadByte()
	if err != nil {
		var ne net.Error
		if ctx.Err() != nil || errors.As(err, &ne) && ne.Timeout() {
			c.conn.Close()
			return fmt.Errorf("%w at %s", ErrTimeout, c.addr)
		}
		return fmt.Errorf("tcpstore %s: %w", c.addr, err)
	}
	if b != waitStop {
		return fmt.Errorf("tcpstore %s: answer %d to WAIT", c.addr, b)
	}
	return nil
}

// Get waits for key as Wait does, then returns its value.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	if err := c.Wait(ctx, key); err != nil {
		return nil, err
	}
	if err := c.send(newRequest(c.d.get).str(keyPrefix+key), time.Now().Add(30*time.Second)); err != nil {
		return nil, err
	}
	return c.readBytes()
}

// CompareSet sets key to desired when its value is expected (or when it
// is absent and expected is empty), and returns the value it holds after.
func (c *Client) CompareSet(key string, expected, desired []byte) ([]byte, error) {
	if err := c.send(newRequest(c.d.compareSet).str(keyPrefix+key).bytes(expected).bytes(desired), time.Now().Add(30*time.Second)); err != nil {
		return nil, err
	}
	return c.readBytes()
}

// NumKeys is the number of keys the store holds.
func (c *Client) NumKeys() (int64, error) {
	if err := c.send(newRequest(c.d.numKeys), time.Now().Add(30*time.Second)); err != nil {
		return 0, err
	}
	v, err := c.readU64()
	return int64(v), err
}

// Delete removes key and reports whether it was there.
func (c *Client) Delete(key string) (bool, error) {
	if err := c.send(newRequest(c.d.deleteKey).str(keyPrefix+key), time.Now().Add(30*time.Second)); err != nil {
		return false, err
	}
	v, err := c.readU64()
	return v == 1, err
}

func (c *Client) readU64() (uint64, error) {
	var b [8]byte
	if _, err := io.ReadFull(c.r, b[:]); err != nil {
		return 0, fmt.Errorf("tcpstore %s: %w", c.addr, err)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func (c *Client) readBytes() ([]byte, error) {
	n, err := c.readU64()
	if err != nil {
		return nil, err
	}
	return readValue(c.r, n, c.addr)
}

// readValue reads a value of n bytes, refusing one over maxValue.
func readValue(r io.Reader, n uint64, addr string) ([]byte, error) {
	if n > maxValue {
		return nil, fmt.Errorf("tcpstore %s: a value of %d bytes (the limit is %d)", addr, n, maxValue)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("tcpstore %s: %w", addr, err)
	}
	return b, nil
}
