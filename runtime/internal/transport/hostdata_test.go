package transport

import (
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

func TestHostDataMode(t *testing.T) {
	for _, c := range []struct {
		cpuOps string
		nodes  int
		want   string
	}{
		{"", 1, hostDataMPI},
		{"", 2, hostDataProbe},
		{"", 5, hostDataProbe},
		{config.ControllerMPI, 1, hostDataMPI},
		{config.ControllerMPI, 3, hostDataMPI},
		{config.ControllerGloo, 1, hostDataTCP},
		{config.ControllerGloo, 4, hostDataTCP},
	} {
		if got := hostDataMode(c.cpuOps, c.nodes); got != c.want {
			t.Errorf("HOROVOD_CPU_OPERATIONS=%q on %d nodes: %s, want %s", c.cpuOps, c.nodes, got, c.want)
		}
	}
}

func TestPickListenIP(t *testing.T) {
	for _, c := range []struct {
		name   string
		own    []string
		others [][]string
		want   string // "" for an error
	}{
		{"one node", []string{"10.0.0.1/24"}, nil, "127.0.0.1"},
		{"one network", []string{"10.88.0.1/24"}, [][]string{{"10.88.0.2/24"}, {"10.88.0.3/24"}}, "10.88.0.1"},
		{"the shared one of two", []string{"172.17.0.2/16", "10.1.0.5/16"}, [][]string{{"10.1.7.9/16", "192.168.1.4/24"}}, "10.1.0.5"},
		{"reaching every node", []string{"10.0.0.1/24", "10.9.0.1/24"},
			[][]string{{"10.0.0.2/24", "10.9.0.2/24"}, {"10.9.0.3/24"}}, "10.9.0.1"},
		{"no common network", []string{"10.0.0.1/24"}, [][]string{{"10.0.1.2/24"}}, ""},
		{"a node with no address", []string{"10.0.0.1/24"}, [][]string{{"10.0.0.2/24"}, nil}, ""},
		{"garbage skipped", []string{"nonsense", "10.0.0.1/24"}, [][]string{{"x", "10.0.0.2/24"}}, "10.0.0.1"},
	} {
		got, err := pickListenIP(c.own, c.others)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("%s: %s, want an error", c.name, got)
		case c.want == "" && !strings.Contains(err.Error(), config.EnvGlooIface):
			t.Errorf("%s: %v does not say how to choose", c.name, err)
		case c.want != "" && (err != nil || got != c.want):
			t.Errorf("%s: %q %v, want %q", c.name, got, err, c.want)
		}
	}
}

// hostDataGroup pairs two in-memory groups of n ranks as MPI and the ring.
func hostDataGroup(n int) []comm.Communicator {
	ctrl, data := memcomm.NewGroup(n), memcomm.NewGroup(n)
	out := make([]comm.Communicator, n)
	for i := range out {
		out[i] = hostDataComm{Communicator: data[i], ctrl: ctrl[i]}
	}
	return out
}

// TestHostDataCommConformance runs the communicator suite over the pair, at
// an even and an odd size: every collective, Split and SplitLocal included,
// must behave as one transport.
func TestHostDataCommConformance(t *testing.T) {
	for _, n := range []int{2, 3} {
		commtest.RunGroup(t, hostDataGroup(n))
	}
}

// TestHostDataCommRoutes checks which half carries what: the patient
// agreement wait on MPI, everything else on the ring; Split keeps both;
// Close closes both.
func TestHostDataCommRoutes(t *testing.T) {
	comms := hostDataGroup(2)
	errs := commtest.OnRanks(comms, func(c comm.Communicator) error {
		h := c.(hostDataComm)
		buf := tensor.FromInt64([]int64{int64(h.Rank() + 1)})
		if err := h.AllreducePatient(buf, tensor.Sum, 0); err != nil {
			return err
		}
		if buf.Int64s()[0] != 3 {
			t.Errorf("patient allreduce: %v", buf.Int64s())
		}
		sub, err := h.Split(0, -h.Rank())
		if err != nil {
			return err
		}
		s := sub.(hostDataComm)
		if s.Rank() != 1-h.Rank() || s.ctrl.Rank() != s.Rank() {
			t.Errorf("split: ring rank %d, MPI rank %d, want %d", s.Rank(), s.ctrl.Rank(), 1-h.Rank())
		}
		if err := s.Close(); err != nil {
			return err
		}
		if err := s.ctrl.Barrier(); err == nil {
			t.Error("the split's MPI half is still open after Close")
		}
		return h.Close()
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
