package secret

import (
	"errors"
	"net"
	"testing"
	"time"
)

func pipe(t *testing.T, a, b []byte, ra, rb Role) (error, error) {
	t.Helper()
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	errs := make(chan error, 1)
	go func() {
		err := Handshake(c2, b, rb, time.Second)
		if err != nil {
			c2.Close()
		}
		errs <- err
	}()
	e1 := Handshake(c1, a, ra, time.Second)
	if e1 != nil {
		c1.Close()
	}
	return e1, <-errs
}

func TestHandshake(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	key, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := New()
	wrong, _ := Parse(other)
	if e1, e2 := pipe(t, key, key, Dialer, Acceptor); e1 != nil || e2 != nil {
		t.Fatalf("same secret refused: %v, %v", e1, e2)
	}
	e1, e2 := pipe(t, key, wrong, Dialer, Acceptor)
	if !errors.Is(e1, ErrRefused) && !errors.Is(e2, ErrRefused) {
		t.Fatalf("wrong secret accepted: %v, %v", e1, e2)
	}
	if e1 == nil && e2 == nil {
		t.Fatal("wrong secret: both ends accepted")
	}
	if e1, e2 := pipe(t, key, key, Dialer, Dialer); !errors.Is(e1, ErrRefused) || !errors.Is(e2, ErrRefused) {
		t.Fatalf("same roles (a reflected answer) accepted: %v, %v", e1, e2)
	}
}

func TestNotAHandshake(t *testing.T) {
	key, _ := Parse("00112233445566778899aabbccddeeff")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip("no loopback TCP:", err)
	}
	defer ln.Close()
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte("GET / HTTP/1.1\r\nHost: example\r\nAccept: */*\r\n\r\n"))
		buf := make([]byte, 128)
		c.Read(buf)
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := Handshake(c, key, Acceptor, time.Second); !errors.Is(err, ErrRefused) {
		t.Fatalf("an HTTP request passed as a handshake: %v", err)
	}
}

func TestSilentPeerTimesOut(t *testing.T) {
	key, _ := Parse("00112233445566778899aabbccddeeff")
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	go func() { // reads the challenge and says nothing
		buf := make([]byte, 64)
		c2.Read(buf)
	}()
	start := time.Now()
	if err := Handshake(c1, key, Acceptor, 100*time.Millisecond); err == nil {
		t.Fatal("a silent peer passed")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestParseSecret(t *testing.T) {
	for _, s := range []string{"", "zz", "0011"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
}
