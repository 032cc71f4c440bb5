package secret

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Role says which end of a connection a side is: the one that dialed or the
// one that accepted. The two ends must take different roles.
type Role byte

// The roles.
const (
	Dialer   Role = 'D'
	Acceptor Role = 'A'
)

// ErrRefused is returned (wrapped) when the other end did not prove that it
// knows the secret, or spoke something else than this protocol.
var ErrRefused = errors.New("auth: peer refused: it does not know the job's secret")

// SecretBytes is the length of the secrets New makes.
const SecretBytes = 32

// magic opens every handshake: the protocol and its version.
var magic = [8]byte{'g', 'h', 'v', 'd', 'a', 'u', 't', 1}

const nonceBytes = 32

// New returns a fresh random secret, hex-encoded for the environment
// (see Parse).
func New() (string, error) {
	b := make([]byte, SecretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("auth: random secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Parse decodes a hex-encoded secret of at least 16 bytes.
func Parse(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("auth: the secret is not hex: %w", err)
	}
	if len(b) < 16 {
		return nil, fmt.Errorf("auth: the secret has %d bytes, want at least 16", len(b))
	}
	return b, nil
}

// mac is the answer of role to the challenge: both nonces, the challenger's
// first.
func mac(secret []byte, role Role, challenge, own []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write(magic[:])
	h.Write([]byte{byte(role)})
	h.Write(challenge)
	h.Write(own)
	return h.Sum(nil)
}

// Handshake runs the mutual proof on conn as role, within timeout (0: no
// deadline of its own). It returns nil when both ends know secret; else an
// error wrapping ErrRefused (the peer's proof was wrong) or the I/O error.
// The connection's deadline is cleared afterwards.
func Handshake(conn net.Conn, secret []byte, role Role, timeout time.Duration) error {
	if len(secret) == 0 {
		return errors.New("auth: no secret")
	}
	if timeout > 0 {
		conn.SetDeadline(time.Now().Add(timeout))
		defer conn.SetDeadline(time.Time{})
	}
	mine := make([]byte, nonceBytes)
	if _, err := rand.Read(mine); err != nil {
		return fmt.Errorf("auth: nonce: %w", err)
	}
	hello := append(append(magic[:len(magic):len(magic)], byte(role)), mine...)
	errc := make(chan error, 1)
	go func() { _, err := conn.Write(hello); errc <- err }()
	theirs := make([]byte, len(hello))
	if _, err := io.ReadFull(conn, theirs); err != nil {
		return fmt.Errorf("auth: reading the peer's challenge: %w", err)
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("auth: sending the challenge: %w", err)
	}
	if [8]byte(theirs[:8]) != magic {
		return fmt.Errorf("%w (not a gohorovod handshake)", ErrRefused)
	}
	peerRole := Role(theirs[8])
	if peerRole == role || (peerRole != Dialer && peerRole != Acceptor) {
		return fmt.Errorf("%w (role %q against %q)", ErrRefused, peerRole, role)
	}
	peerNonce := theirs[9:]
	go func() { _, err := conn.Write(mac(secret, role, peerNonce, mine)); errc <- err }()
	answer := make([]byte, sha256.Size)
	if _, err := io.ReadFull(conn, answer); err != nil {
		return fmt.Errorf("auth: reading the peer's answer: %w", err)
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("auth: sending the answer: %w", err)
	}
	if !hmac.Equal(answer, mac(secret, peerRole, mine, peerNonce)) {
		return ErrRefused
	}
	return nil
}
