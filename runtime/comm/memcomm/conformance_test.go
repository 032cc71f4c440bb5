package memcomm_test

import (
	"testing"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
)

// TestConformanceMemory runs the conformance suite against in-memory groups
// of several sizes, and against two simulated nodes of two ranks each.
func TestConformanceMemory(t *testing.T) {
	groups := []struct {
		name  string
		comms func() []comm.Communicator
	}{
		{"n=1", func() []comm.Communicator { return memcomm.NewGroup(1) }},
		{"n=2", func() []comm.Communicator { return memcomm.NewGroup(2) }},
		{"n=3", func() []comm.Communicator { return memcomm.NewGroup(3) }},
		{"n=4", func() []comm.Communicator { return memcomm.NewGroup(4) }},
		{"nodes=2x2", func() []comm.Communicator { return memcomm.NewGroupNodes(2, 2) }},
		{"nodes=1+3", func() []comm.Communicator { return memcomm.NewGroupNodes(1, 3) }},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			comms := g.comms()
			commtest.RunGroup(t, comms)
			for _, c := range comms {
				if err := c.Close(); err != nil {
					t.Errorf("close rank %d: %v", c.Rank(), err)
				}
			}
		})
	}
}
