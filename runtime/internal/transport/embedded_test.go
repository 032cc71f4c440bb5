package transport

import (
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/internal/job/rendezvous/rendezvoustest"
	"github.com/gohorovod/gohorovod/runtime/comm/embedded"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// glooJob starts a rendezvous server for the slots and returns each slot's
// configuration, as gohorovodrun --gloo would set it in the environment.
func glooJob(t *testing.T, slots []rendezvous.Slot) []config.Config {
	return rendezvoustest.Job(t, config.Default(), slots)
}

// TestOpenEmbeddedErrors: the embedded transport's set-up errors say what
// is missing.
func TestOpenEmbeddedErrors(t *testing.T) {
	cfgs := glooJob(t, []rendezvous.Slot{{Host: "h", LocalRank: 0}, {Host: "h", LocalRank: 1}})
	for _, tt := range []struct {
		name string
		edit func(*config.Config)
		want string
	}{
		{"no secret", func(c *config.Config) { c.Secret = "" }, "GOHOROVOD_SECRET"},
		{"no local rank", func(c *config.Config) { c.LocalRank = config.Unset }, "HOROVOD_LOCAL_RANK"},
		{"wrong secret", func(c *config.Config) { c.Secret = config.Secret(strings.Repeat("ab", 32)) }, "secret"},
		{"missing peer", func(c *config.Config) { c.GlooTimeout = 300 * time.Millisecond }, "local rank 1"},
		{"no server", func(c *config.Config) { c.RendezvousAddr, c.Controller = "", config.ControllerGloo }, "rendezvous"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := cfgs[0]
			tt.edit(&c)
			if tt.name == "wrong secret" {
				c.GlooTimeout = 500 * time.Millisecond
			}
			pl, err := Open(c, 0, Env{Lookup: noEnv})
			if err == nil {
				pl.Comm.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tt.want)) {
				t.Fatalf("%v does not mention %q", err, tt.want)
			}
		})
	}
}

// TestOpenEmbeddedFromEnvironment: a program that passes its own
// configuration (WithConfig) still runs on the embedded transport when the
// launcher's variables say so, as it runs on MPI under mpirun; otherwise
// each worker of a --gloo job would run alone.
func TestOpenEmbeddedFromEnvironment(t *testing.T) {
	cfgs := glooJob(t, []rendezvous.Slot{{Host: "h", LocalRank: 0}})
	env := map[string]string{}
	for _, kv := range cfgs[0].Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	pl, err := Open(config.Default(), 0, Env{Lookup: lookup})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Comm.Close()
	if pl.Name != Embedded || pl.Comm.Size() != 1 || pl.Elastic() {
		t.Fatalf("transport %q of %d ranks (elastic %v), want %q of 1", pl.Name, pl.Comm.Size(), pl.Elastic(), Embedded)
	}
}

// noEnv is an empty environment.
func noEnv(string) (string, bool) { return "", false }

// TestOpenEmbeddedAlgorithms: GOHOROVOD_EMBEDDED_ALLGATHER and
// GOHOROVOD_EMBEDDED_ALLREDUCE reach the embedded communicator, which
// then runs the algorithms they force.
func TestOpenEmbeddedAlgorithms(t *testing.T) {
	cfgs := glooJob(t, []rendezvous.Slot{{Host: "h", LocalRank: 0}})
	c := cfgs[0]
	c.EmbeddedAllgather, c.EmbeddedAllreduce = "ring", "doubling"
	pl, err := Open(c, 0, Env{Lookup: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Comm.Close()
	ec, ok := pl.Comm.(embeddedComm)
	if !ok {
		t.Fatalf("Open returned a %T, want the embedded transport's", pl.Comm)
	}
	want := embedded.Algorithms{Allgather: embedded.Ring, Allreduce: embedded.Doubling}
	if got := ec.Algorithms(); got != want {
		t.Errorf("the communicator's algorithms are %+v, want %+v", got, want)
	}
}
