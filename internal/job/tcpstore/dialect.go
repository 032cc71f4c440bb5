package tcpstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"time"
)

// dialect is how one generation of torch's TCPStore server numbers its
// queries, and what a client must send first on every connection.
type dialect struct {
	name string
	// validate: open each connection with VALIDATE and the magic number;
	// such a server drops (or ignores) a client that sends anything else
	// first.
	validate bool
	// ping: then PING with a nonce, which the server echoes.
	ping bool

	set, compareSet, get, add, check, wait, numKeys, deleteKey byte
}

// torch1 is the numbering of torch 1.x's server (and of torch 2's before
// it asked for validation): no handshake.
var torch1 = dialect{
	name: "torch 1.x",
	set:  0, compareSet: 1, get: 2, add: 3, check: 4, wait: 5, numKeys: 6, deleteKey: 8,
}

// torch2 is the numbering of torch 2's validating servers (the libuv one,
// the default since torch 2.4, and the classic one): VALIDATE took query
// number 0 and shifted every other query up by one.
var torch2 = dialect{
	name: "torch 2", validate: true,
	set: 1, compareSet: 2, get: 3, add: 4, check: 5, wait: 6, numKeys: 7, deleteKey: 8,
}

// torch2Ping is torch2 on a server that also answers PING, as the servers
// that torch 2's own clients (which always ping) need.
var torch2Ping = func() dialect { d := torch2; d.name = "torch 2 (ping)"; d.ping = true; return d }()

// The handshake of torch 2's servers. Numbers go in the host's byte order,
// as torch sends them.
const (
	queryValidate   byte   = 0
	queryPing       byte   = 13
	validationMagic uint32 = 0x3C85F7CE
)

// probeTimeout bounds each probe's wait for an answer: a server answers a
// handshake at once, or closes the connection at once.
const probeTimeout = 10 * time.Second

// pingNonce is a random nonce for PING with bit 23 set. A torch 1.x server
// reads VALIDATE as a SET, and then the magic, the PING byte and the
// nonce's three low bytes as the key's length; with bit 23 set, on a
// little-endian host that length is 2^63 or more, which such a server
// refuses at once (it closes the connection) instead of allocating.
func pingNonce() uint32 { return rand.Uint32() | 1<<23 }

func handshake(d dialect, nonce uint32) request {
	var r request
	if d.validate {
		r = binary.NativeEndian.AppendUint32(append(r, queryValidate), validationMagic)
	}
	if d.ping {
		r = binary.NativeEndian.AppendUint32(append(r, queryPing), nonce)
	}
	return r
}

// probe learns which dialect the server at addr speaks, on connections of
// its own that it closes: first torch 2's full handshake (VALIDATE, then
// PING); a server that closes the connection instead of echoing the nonce
// is asked VALIDATE and then the number of keys in torch 2's numbering; a
// server that closes that one too speaks torch 1.x.
func probe(ctx context.Context, addr string) (dialect, error) {
	nonce := pingNonce()
	echo, err := ask(ctx, addr, handshake(torch2Ping, nonce), 4)
	if err == nil {
		if got := binary.NativeEndian.Uint32(echo); got != nonce {
			return dialect{}, fmt.Errorf("tcpstore %s: PING with nonce %#x was answered with %#x", addr, nonce, got)
		}
		return torch2Ping, nil
	}
	if !errors.Is(err, errRefused) {
		return dialect{}, err
	}
	if _, err = ask(ctx, addr, append(handshake(torch2, 0), torch2.numKeys), 8); err == nil {
		return torch2, nil
	}
	if !errors.Is(err, errRefused) {
		return dialect{}, err
	}
	return torch1, nil
}

// errRefused is what ask returns when the server closed the connection
// instead of answering.
var errRefused = errors.New("the server closed the connection")

// ask sends r on a new connection, closes the sending half (so that a
// server still waiting for more of a request sees the end), and reads n
// bytes of answer.
func ask(ctx context.Context, addr string, r request, n int) ([]byte, error) {
	conn, err := dialRetry(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	dl := time.Now().Add(probeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	conn.SetDeadline(dl)
	if _, err := conn.Write(r); err != nil {
		return nil, fmt.Errorf("%w: %w", errRefused, err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(conn, b); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("tcpstore %s: no answer to the handshake in time: is this torch's TCPStore? %w", addr, err)
		}
		return nil, fmt.Errorf("%w: %w", errRefused, err)
	}
	return b, nil
}
