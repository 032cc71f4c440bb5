// Package rendezvoustest starts a rendezvous server on loopback for tests
// of the workers that meet through it (the embedded transport's Init), and
// gives each worker the configuration gohorovodrun --gloo would set in its
// environment.
package rendezvoustest

import (
	"net"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/internal/job/secret"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// Job starts a rendezvous server for slots, closed when the test ends, and
// returns each slot's configuration: base with the embedded transport's
// controller, the server's address, the job secret, the slot's host and
// local rank, and a 20 s connect timeout. It skips the test where no
// loopback TCP can be listened on.
func Job(t testing.TB, base config.Config, slots []rendezvous.Slot) []config.Config {
	t.Helper()
	hex, err := secret.New()
	if err != nil {
		t.Fatal(err)
	}
	key, _ := secret.Parse(hex)
	srv, err := rendezvous.NewServer(key, slots)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip("no loopback TCP:", err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	cfgs := make([]config.Config, len(slots))
	for i, s := range slots {
		c := base
		c.Controller = config.ControllerGloo
		c.RendezvousAddr, c.RendezvousPort = "127.0.0.1", port
		c.Secret = config.Secret(hex)
		c.Hostname, c.LocalRank = s.Host, s.LocalRank
		c.GlooTimeout = 20 * time.Second
		cfgs[i] = c
	}
	return cfgs
}
