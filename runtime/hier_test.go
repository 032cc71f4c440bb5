package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// hierRun runs every rank of a fresh in-memory group placed on nodes by
// nodeOf, with the hierarchical knobs as given, through the same sequence of
// collectives (hierWorkload), and returns each rank's results, log and
// counters.
func hierRun(t *testing.T, nodeOf []int, hierarchical bool, sets bool) ([][]*tensor.Tensor, []string, []Stats) {
	t.Helper()
	n := len(nodeOf)
	group := memcomm.NewGroupWith(n, memcomm.GroupOptions{NodeOf: nodeOf})
	cfg := testConfig()
	cfg.HierarchicalAllreduce, cfg.HierarchicalAllgather = hierarchical, hierarchical
	cfg.FusionThreshold = 1 << 16
	logs := make([]*logSink, n)
	evens := make([]*ProcessSet, n)
	rts, errs := initEach(t, group, func(rank int) []Option {
		logs[rank] = new(logSink)
		opts := []Option{WithConfig(cfg), WithLogger(zerolog.New(logs[rank]).Level(zerolog.DebugLevel))}
		if sets {
			evens[rank] = NewProcessSet(parity(n, 0)...)
			opts = append(opts, WithProcessSets(evens[rank]))
		}
		return opts
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	out := make([][]*tensor.Tensor, n)
	(&cluster{rts: rts}).each(t, func(r *Runtime, rank int) error {
		var opts []CallOption
		if sets {
			if !evens[rank].Included() {
				return nil
			}
			opts = append(opts, InProcessSet(evens[rank]))
		}
		res, err := hierWorkload(r, rank, opts)
		out[rank] = res
		return err
	})
	StopLocal(rts)
	ls := make([]string, n)
	st := make([]Stats, n)
	for i, b := range logs {
		ls[i] = b.b.String() // the loops have stopped
		st[i] = rts[i].Stats()
	}
	return out, ls, st
}

// hierWorkload: allreduces of every op over integer and float dtypes and
// odd lengths (several in flight, so that they fuse), a large one that is
// chunked, and allgathers with uneven first dimensions.
func hierWorkload(r *Runtime, rank int, opts []CallOption) ([]*tensor.Tensor, error) {
	ctx := context.Background()
	var hs []*Handle
	k := 0
	for _, dt := range []tensor.DType{tensor.Int32, tensor.Int64, tensor.Float32, tensor.Float64, tensor.Uint8} {
		for _, op := range []ReduceOp{Sum, Min, Max, Product, Average} {
			for _, n := range []int{1, 3, 7, 1001} {
				if dt == tensor.Uint8 && (op == Average || op == Product) {
					continue
				}
				x := tensor.New(tensor.Float64, n)
				for i := range x.Float64s() {
					x.Float64s()[i] = float64((rank*7+i*3+k)%5) - 1 // small values: products stay exact
					if dt == tensor.Uint8 {
						x.Float64s()[i] += 1
					}
				}
				in := castTo(x.Float64s(), dt)
				h, err := r.AllreduceAsync(in, fmt.Sprintf("t%d", k), op, opts...)
				if err != nil {
					return nil, err
				}
				hs = append(hs, h)
				k++
			}
		}
	}
	big := tensor.New(tensor.Float32, 3<<20/4+5) // larger than a chunk, odd
	for i := range big.Float32s() {
		big.Float32s()[i] = float32((i+rank)%9) * 0.25
	}
	h, err := r.AllreduceAsync(big, "big", Sum, opts...)
	if err != nil {
		return nil, err
	}
	hs = append(hs, h)
	for i, rows := range []int{rank + 1, 0, 2*rank + 3} {
		g := tensor.New(tensor.Int64, rows, 3)
		for j := range g.Int64s() {
			g.Int64s()[j] = int64(rank*1000 + j)
		}
		h, err := r.AllgatherAsync(g, fmt.Sprintf("g%d", i), opts...)
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	out := make([]*tensor.Tensor, len(hs))
	for i, h := range hs {
		if err := h.Wait(ctx); err != nil {
			return nil, err
		}
		out[i] = h.Output()
	}
	return out, nil
}

// sameResults compares two runs' results: integers bit for bit, floats
// within a relative 1e-6.
func sameResults(flat, hier [][]*tensor.Tensor) error {
	for rank := range flat {
		if len(flat[rank]) != len(hier[rank]) {
			return fmt.Errorf("rank %d: %d results, flat %d", rank, len(hier[rank]), len(flat[rank]))
		}
		for i, f := range flat[rank] {
			h := hier[rank][i]
			if !f.DType().IsFloat() {
				if !bytes.Equal(f.Bytes(), h.Bytes()) || fmt.Sprint(f.Shape()) != fmt.Sprint(h.Shape()) {
					return fmt.Errorf("rank %d result %d (%v): differs from flat", rank, i, f.DType())
				}
				continue
			}
			a, b := floats(f), floats(h)
			for j, v := range a {
				if w := b[j]; math.Abs(v-w) > 1e-6*math.Max(1, math.Abs(v)) {
					return fmt.Errorf("rank %d result %d[%d]: %v, flat %v", rank, i, j, w, v)
				}
			}
		}
	}
	return nil
}

func TestHierarchicalEqualsFlat(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nodeOf []int
		layout string // "" when one node: the knobs are ignored
		sets   bool
	}{
		{"2x2", []int{0, 0, 1, 1}, "2x2", false},
		{"3 nodes x 2", []int{0, 0, 1, 1, 2, 2}, "3x2", false},
		{"2 nodes x 3", []int{0, 0, 0, 1, 1, 1}, "2x3", false},
		{"uneven 2+1", []int{0, 0, 1}, "2+1", false},
		{"alternating", []int{0, 1, 0, 1}, "nodes[0 1 0 1]", false},
		{"one node", []int{0, 0, 0}, "", false},
		{"even ranks' set on 2x2", []int{0, 0, 1, 1}, "2x1", true},
		{"even ranks' set on 4 nodes x 2", []int{0, 0, 1, 1, 2, 2, 3, 3}, "4x1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flat, _, flatStats := hierRun(t, tc.nodeOf, false, tc.sets)
			hier, logs, hierStats := hierRun(t, tc.nodeOf, true, tc.sets)
			if err := sameResults(flat, hier); err != nil {
				t.Fatal(err)
			}
			for rank := range tc.nodeOf {
				f, h := flatStats[rank], hierStats[rank]
				if f.HierarchicalAllreduces != 0 || f.HierarchicalAllgathers != 0 {
					t.Fatalf("rank %d: flat run counted hierarchical collectives: %+v", rank, f)
				}
				// The ranks that ran the workload on several nodes ran
				// every allreduce and allgather hierarchically.
				ran := !tc.sets || rank%2 == 0
				if on := h.HierarchicalAllreduces > 0 && h.HierarchicalAllgathers > 0; on != (ran && tc.layout != "") {
					t.Fatalf("rank %d (layout %q): %d hierarchical allreduces, %d allgathers", rank, tc.layout,
						h.HierarchicalAllreduces, h.HierarchicalAllgathers)
				}
			}
			on := strings.Contains(logs[0], "hierarchical collectives on")
			if tc.layout == "" {
				if on || !strings.Contains(logs[0], "are ignored: every rank of the process set is on one node") {
					t.Fatalf("one node: want the ignored line on rank 0:\n%s", logs[0])
				}
				return
			}
			if !on || !strings.Contains(logs[0], `"layout":"`+tc.layout+`"`) {
				t.Fatalf("want hierarchical collectives on, layout %s:\n%s", tc.layout, logs[0])
			}
			uneven := strings.Contains(logs[0], "Using different number of ranks per node")
			if uneven != strings.Contains(tc.layout, "+") {
				t.Fatalf("uneven-nodes warning %v for layout %s:\n%s", uneven, tc.layout, logs[0])
			}
		})
	}
}

// TestHostnameNamesNodes: over a given communicator (as under MPI),
// HOROVOD_HOSTNAME groups the ranks into nodes; set on some ranks only,
// Init fails on every rank.
func TestHostnameNamesNodes(t *testing.T) {
	names := []string{"b", "a", "b", "a"}
	rts, errs := initEach(t, memcomm.NewGroup(4), func(rank int) []Option {
		cfg := testConfig()
		cfg.Hostname = names[rank]
		return []Option{WithConfig(cfg)}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, r := range rts {
		// "b" holds ranks 0 and 2 (node 0), "a" ranks 1 and 3.
		if r.LocalSize() != 2 || r.LocalRank() != i/2 || r.CrossSize() != 2 || r.CrossRank() != i%2 {
			t.Errorf("rank %d: local %d/%d cross %d/%d", i, r.LocalRank(), r.LocalSize(), r.CrossRank(), r.CrossSize())
		}
		if fmt.Sprint(r.nodes) != "[0 1 0 1]" {
			t.Errorf("rank %d: nodes %v", i, r.nodes)
		}
	}
	_, errs = initEach(t, memcomm.NewGroup(3), func(rank int) []Option {
		cfg := testConfig()
		if rank == 1 {
			cfg.Hostname = "a"
		}
		return []Option{WithConfig(cfg)}
	})
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), config.EnvHostname+" is set on 1 of 3 ranks") {
			t.Errorf("rank %d: Init = %v", i, err)
		}
	}
}

// castTo returns xs as a tensor of dt (the integer and float types the
// workload uses).
func castTo(xs []float64, dt tensor.DType) *tensor.Tensor {
	t := tensor.New(dt, len(xs))
	for i, v := range xs {
		switch dt {
		case tensor.Int32:
			t.Int32s()[i] = int32(v)
		case tensor.Int64:
			t.Int64s()[i] = int64(v)
		case tensor.Float32:
			t.Float32s()[i] = float32(v)
		case tensor.Float64:
			t.Float64s()[i] = v
		case tensor.Uint8:
			t.Bytes()[i] = uint8(v)
		}
	}
	return t
}

// floats returns a float32 or float64 tensor's elements as float64s.
func floats(t *tensor.Tensor) []float64 {
	if t.DType() == tensor.Float64 {
		return t.Float64s()
	}
	out := make([]float64, t.Len())
	for i, v := range t.Float32s() {
		out[i] = float64(v)
	}
	return out
}
