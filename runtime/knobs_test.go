package runtime

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/transport"
	"github.com/gohorovod/gohorovod/tensor"
)

// initAll runs Init on every member of group concurrently, rank r with
// opts(r) after its communicator, and returns each rank's error.
func initAll(group []comm.Communicator, rts []*Runtime, opts func(rank int) []Option) []error {
	return commtest.OnRanks(commtest.Ranks(len(group)), func(r int) error {
		return rts[r].Init(append([]Option{WithCommunicator(group[r]), WithLogger(zerolog.Nop())}, opts(r)...)...)
	})
}

func TestKnobAgreementAtInit(t *testing.T) {
	cfgWith := func(f func(*config.Config)) config.Config {
		c := testConfig()
		f(&c)
		return c
	}
	tests := []struct {
		name string
		n    int
		opts func(rank int) []Option // the rank's options; nil: agreement
		want string                  // the message after "hvd: Horovod initialization failed: "
	}{
		{"fusion threshold, 2 ranks", 2, func(r int) []Option {
			return []Option{WithConfig(cfgWith(func(c *config.Config) {
				c.FusionThreshold = []int64{64 << 20, 1 << 20}[r]
			}))}
		}, "ranks disagree on HOROVOD_FUSION_THRESHOLD: rank 0: 67108864, rank 1: 1048576 (every rank must be started with the same value)"},
		{"fusion threshold, 3 ranks, one differs", 3, func(r int) []Option {
			return []Option{WithConfig(cfgWith(func(c *config.Config) {
				if r == 2 {
					c.FusionThreshold = 0
				}
			}))}
		}, "ranks disagree on HOROVOD_FUSION_THRESHOLD: ranks 0-1: 1048576, rank 2: 0 (every rank must be started with the same value)"},
		{"cycle time and cache capacity, 3 ranks", 3, func(r int) []Option {
			return []Option{WithConfig(cfgWith(func(c *config.Config) {
				if r == 1 {
					c.CacheCapacity = 16
				}
				if r == 2 {
					c.CycleTime = 2500 * time.Microsecond
				}
			}))}
		}, "ranks disagree on HOROVOD_CYCLE_TIME: ranks 0-1: 1, rank 2: 2.5; on HOROVOD_CACHE_CAPACITY: rank 0: 1024, rank 1: 16, rank 2: 1024 (every rank must be started with the same values)"},
		{"chunk option on one rank", 2, func(r int) []Option {
			o := []Option{WithConfig(testConfig())}
			if r == 1 {
				o = append(o, WithChunkBytes(1024))
			}
			return o
		}, "ranks disagree on hvd.WithChunkBytes: rank 0: 4194304, rank 1: 1024 (every rank must be started with the same value)"},
		{"fusion options, 3 ranks", 3, func(r int) []Option {
			return []Option{WithConfig(testConfig()), WithMaxFusedBytes(int64(r)), WithFusionChunkBytes(4096)}
		}, "ranks disagree on hvd.WithMaxFusedBytes: rank 0: 0, rank 1: 1, rank 2: 2 (every rank must be started with the same value)"},
		{"rank-local knobs may differ", 3, func(r int) []Option {
			return []Option{WithConfig(cfgWith(func(c *config.Config) {
				c.StallCheckTime = time.Duration(r+1) * time.Minute
				c.StallShutdownTime = time.Duration(r) * time.Hour
				c.StallCheckDisable = r == 1
				c.LogLevel = config.LogLevel(r)
				if r == 0 {
					c.Timeline = filepath.Join(t.TempDir(), "tl.json")
				}
			}))}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			group := memcomm.NewGroupWith(tt.n, memcomm.GroupOptions{Timeout: 30 * time.Second})
			rts := make([]*Runtime, tt.n)
			for r := range rts {
				rts[r] = new(Runtime)
			}
			errs := initAll(group, rts, tt.opts)
			if tt.want == "" {
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: Init = %v, want success", r, err)
					}
				}
				if err := StopLocal(rts); err != nil {
					t.Fatal(err)
				}
				return
			}
			for r, err := range errs {
				var ae *config.AgreementError
				if !errors.As(err, &ae) {
					t.Fatalf("rank %d: Init = %v, want a *config.AgreementError", r, err)
				}
				if got, want := err.Error(), "hvd: Horovod initialization failed: "+tt.want; got != want {
					t.Errorf("rank %d:\n got %s\nwant %s", r, got, want)
				}
				if rts[r].IsInitialized() {
					t.Errorf("rank %d: initialised after a failed Init", r)
				}
			}
			// The same communicators, with every rank alike: Init works.
			errs = initAll(group, rts, func(int) []Option { return []Option{WithConfig(testConfig())} })
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: Init with agreeing knobs: %v", r, err)
				}
			}
			c := &cluster{rts: rts}
			c.each(t, func(r *Runtime, rank int) error {
				x, err := r.Allreduce(ctxT(t), fill(tensor.Float32, 4, float64(rank)), "agree.x", Sum)
				if err == nil && first(x) != float64(tt.n*(tt.n-1)/2) {
					t.Errorf("rank %d: sum %v", rank, first(x))
				}
				return err
			})
			if err := StopLocal(rts); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestKnobAgreementClosesTimeline: a failed agreement closes the timeline
// file that rank 0 opened (no descriptor of the process still refers to it).
func TestKnobAgreementClosesTimeline(t *testing.T) {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	path := filepath.Join(t.TempDir(), "tl.json")
	open := func() bool {
		fds, _ = os.ReadDir("/proc/self/fd")
		for _, fd := range fds {
			if target, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); target == path {
				return true
			}
		}
		return false
	}
	group := memcomm.NewGroupWith(2, memcomm.GroupOptions{Timeout: 30 * time.Second})
	rts := []*Runtime{new(Runtime), new(Runtime)}
	errs := initAll(group, rts, func(r int) []Option {
		c := testConfig()
		c.Timeline = path
		c.CacheCapacity = r
		return []Option{WithConfig(c)}
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "HOROVOD_CACHE_CAPACITY") {
			t.Fatalf("rank %d: Init = %v", r, err)
		}
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("rank 0 opened no timeline: %v", err)
	}
	if open() {
		t.Error("the timeline is still open after the failed Init")
	}
}

func TestUnimplementedKnobWarning(t *testing.T) {
	tests := []struct {
		name string
		cfg  func(*config.Config)
		env  map[string]string // set instead of WithConfig when non-nil
		want []string          // variables warned about
	}{
		{"none set", func(*config.Config) {}, nil, nil},
		{"implemented knobs", func(c *config.Config) { c.FusionThreshold, c.StallCheckDisable = 0, true }, nil, nil},
		{"autotune and hierarchical are implemented; MPI threads are not", func(c *config.Config) {
			c.Autotune, c.HierarchicalAllreduce, c.HierarchicalAllgather, c.MPIThreadsDisable = true, true, true, true
		}, nil, []string{config.EnvMPIThreadsDisable}},
		{"placement", func(c *config.Config) { c.Rank, c.Size = 0, 1 }, nil, []string{config.EnvRank, config.EnvSize}},
		{"from the environment", nil, map[string]string{config.EnvMPIThreadsDisable: "1", config.EnvAutotuneWarmupSamples: "7",
			config.EnvHierarchicalAllgather: "0"}, []string{config.EnvMPIThreadsDisable}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			opts := []Option{WithCommunicator(memcomm.NewGroup(1)[0]), WithLogger(zerolog.New(&buf))}
			if tt.env != nil {
				for _, name := range config.Names() {
					t.Setenv(name, "")
				}
				for k, v := range tt.env {
					t.Setenv(k, v)
				}
			} else {
				c := testConfig()
				tt.cfg(&c)
				opts = append(opts, WithConfig(c))
			}
			r := new(Runtime)
			if err := r.Init(opts...); err != nil {
				t.Fatal(err)
			}
			if err := r.Shutdown(); err != nil { // the loop has stopped writing to buf
				t.Fatal(err)
			}
			out := buf.String()
			if got := strings.Count(out, "not implemented yet"); got != len(tt.want) {
				t.Errorf("%d warnings, want %d:\n%s", got, len(tt.want), out)
			}
			for _, name := range tt.want {
				if !strings.Contains(out, `"knob":"`+name+`"`) || !strings.Contains(out, name+" is set but not implemented yet") {
					t.Errorf("no warning naming %s:\n%s", name, out)
				}
			}
			if len(tt.want) > 0 && !strings.Contains(out, `"level":"warn"`) {
				t.Errorf("not at warning level:\n%s", out)
			}
		})
	}
}

func TestAcrossNodesPath(t *testing.T) {
	def := config.Default()
	if _, ok := acrossNodesPath(def, transport.MPI, 1); ok {
		t.Error("one node: the defaults must stand")
	}
	if _, ok := acrossNodesPath(def, transport.Embedded, 3); ok {
		t.Error("the embedded transport keeps its defaults across nodes")
	}
	p, ok := acrossNodesPath(def, transport.MPI, 2)
	if !ok || p != (dataPath{fusion: acrossNodesFusion}) {
		t.Errorf("MPI across 2 nodes: %+v %v; want one call per fused response, every tensor fused, 128 MiB", p, ok)
	}
	mine := def
	mine.FusionThreshold = 1 << 20
	if p, _ := acrossNodesPath(mine, transport.MPI, 2); p.fusion != 1<<20 {
		t.Errorf("the user's threshold %d became %d", mine.FusionThreshold, p.fusion)
	}
}

func TestCountNodesOnUnevenNodes(t *testing.T) {
	for _, tc := range []struct {
		nodes []int
		want  int
	}{
		{nil, 0}, {[]int{0}, 1}, {[]int{0, 0, 0}, 1},
		// -H a:2,b:1: local rank 1 of node a has a cross group of one rank,
		// yet the job spans two nodes on every rank.
		{[]int{0, 0, 2}, 2}, {[]int{0, 1, 0, 1}, 2}, {[]int{0, 1, 2}, 3},
	} {
		if got := countNodes(tc.nodes); got != tc.want {
			t.Errorf("%v: %d nodes, want %d", tc.nodes, got, tc.want)
		}
	}
}
