package transport

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/origin"
	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/internal/job/tcpstore/tcpstoretest"
	"github.com/gohorovod/gohorovod/mpi"
	"github.com/gohorovod/gohorovod/runtime/config"
)

func lookupOf(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestPlacedBy(t *testing.T) {
	torch := []string{"RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "29500"}
	srun := []string{"SLURM_JOB_ID", "5", "SLURM_STEP_ID", "0", "SLURM_PROCID", "1", "SLURM_STEP_NUM_TASKS", "2",
		"SLURM_LOCALID", "1", "SLURM_NODEID", "0", "SLURM_STEP_NODELIST", "n1", "SLURM_STEP_TASKS_PER_NODE", "2"}
	gloo := config.Default()
	gloo.Controller = config.ControllerGloo
	type placedCase struct {
		name   string
		cfg    config.Config
		env    []string
		placed string // the engine, or "" for not placed
	}
	cases := []placedCase{
		{"nothing", config.Default(), nil, ""},
		{"torch", config.Default(), torch, origin.EnvInit},
		{"one torch process", config.Default(), []string{"RANK", "0", "WORLD_SIZE", "1", "MASTER_ADDR", "h", "MASTER_PORT", "1"}, ""},
		{"mpirun wins over torch", config.Default(), append(append([]string{}, torch...), "OMPI_COMM_WORLD_SIZE", "2"), ""},
		{"a PMI wins over srun", gloo, append(append([]string{}, srun...), "PMIX_RANK", "1"), ""},
		{"srun, embedded by choice", gloo, srun, origin.Srun},
	}
	if mpi.Built {
		cases = append(cases, placedCase{"srun, MPI build: MPI's (CheckSrun says what is missing)", config.Default(), srun, ""})
	} else {
		cases = append(cases, placedCase{"srun, no MPI built in", config.Default(), srun, origin.Srun})
	}
	for _, c := range cases {
		p, ok, err := placedBy(c.cfg, lookupOf(c.env...))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := map[bool]string{true: p.Engine}[ok]; got != c.placed {
			t.Errorf("%s: placed by %q, want %q", c.name, got, c.placed)
		}
	}
	if _, _, err := placedBy(config.Default(), lookupOf("RANK", "0", "WORLD_SIZE", "2")); err == nil || !strings.Contains(err.Error(), "MASTER_ADDR") {
		t.Errorf("torch's variables without a master: %v", err)
	}
}

// A store that drops every connection at once, as a store of a protocol
// the client does not know might, gets an error that says what to do.
func TestStoreMeetTorch2Hint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			io.CopyN(io.Discard, c, 1)
			c.Close()
		}
	}()
	p := origin.Placement{Engine: origin.Torchrun, Rank: 0, Size: 2, Master: l.Addr().String(), Store: true, Job: "j",
		Slots: []rendezvous.Slot{{Host: "node0", LocalRank: 0}, {Host: "node0", LocalRank: 1}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = storeMeet(p)(ctx, rendezvous.Member{Slot: p.Slots[0], Data: "{}"})
	if err == nil || !strings.Contains(err.Error(), "--rdzv_backend c10d") {
		t.Errorf("storeMeet against a store that hangs up: %v", err)
	}
}

// Two workers meet through a store of torch 2's protocol (the libuv
// server of a current torchrun's agent, which wants VALIDATE first and
// answers PING): each publishes its data and reads the other's.
func TestStoreMeetTorch2(t *testing.T) {
	s, err := tcpstoretest.Start(true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	slots := []rendezvous.Slot{{Host: "node0", LocalRank: 0}, {Host: "node0", LocalRank: 1}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make([]rendezvous.Assignment, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := origin.Placement{Engine: origin.Torchrun, Rank: r, Size: 2, Master: s.Addr(), Store: true, Job: "j", Slots: slots}
			got[r], errs[r] = storeMeet(p)(ctx, rendezvous.Member{Slot: slots[r], Data: fmt.Sprintf("rank %d", r)})
		}()
	}
	wg.Wait()
	for r := range 2 {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if len(got[r].Members) != 2 || got[r].Members[0].Data != "rank 0" || got[r].Members[1].Data != "rank 1" {
			t.Errorf("rank %d met %+v", r, got[r].Members)
		}
	}
	if _, refused := s.Counts(); refused != 0 {
		t.Errorf("the store refused %d connections that did not open with VALIDATE", refused)
	}
}
