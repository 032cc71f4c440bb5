package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestUnimplemented(t *testing.T) {
	tests := []struct {
		name string
		set  func(*Config)
		want []string
	}{
		{"default", func(*Config) {}, nil},
		{"implemented knobs only", func(c *Config) {
			c.FusionThreshold, c.CycleTime, c.Timeline, c.StallCheckDisable = 1, time.Second, "t.json", true
		}, nil},
		{"set to the default explicitly", func(c *Config) { c.Autotune, c.AutotuneNoise = false, DefaultAutotuneNoise }, nil},
		{"hierarchical and dynamic process sets", func(c *Config) {
			c.HierarchicalAllreduce, c.HierarchicalAllgather, c.DynamicProcessSets = true, true, true
		}, nil},
		{"mpi threads", func(c *Config) { c.MPIThreadsDisable = true }, []string{EnvMPIThreadsDisable}},
		{"autotune is implemented", func(c *Config) {
			c.Autotune, c.AutotuneLog, c.AutotuneWarmupSamples, c.AutotuneStepsPerSample = true, "at.csv", 0, 1
		}, nil},
		{"placement", func(c *Config) { c.Rank, c.Size, c.Hostname = 0, 2, "h1" }, []string{EnvRank, EnvSize}},
		{"placement local and cross", func(c *Config) { c.LocalRank, c.LocalSize, c.CrossRank, c.CrossSize = 0, 1, 0, 1 },
			[]string{EnvLocalRank, EnvLocalSize, EnvCrossRank, EnvCrossSize}},
		{"elastic without gloo", func(c *Config) { c.Elastic = true }, []string{EnvElastic}},
		{"elastic under gloo", func(c *Config) { c.Elastic, c.Controller = true, ControllerGloo }, nil},
		// The Gloo controller uses the placement.
		{"placement under gloo", func(c *Config) { c.Rank, c.Size, c.Hostname, c.Controller = 0, 2, "h1", ControllerGloo }, nil},
		{"placement with a rendezvous", func(c *Config) {
			c.Rank, c.LocalRank, c.RendezvousAddr, c.RendezvousPort = 0, 0, "h", 1
		}, nil},
		{"placement under mpi with a rendezvous", func(c *Config) {
			c.Rank, c.RendezvousAddr, c.RendezvousPort, c.Controller = 0, "h", 1, ControllerMPI
		}, []string{EnvRank}},
		{"gloo with unimplemented knobs", func(c *Config) { c.Controller, c.MPIThreadsDisable, c.Rank = ControllerGloo, true, 1 },
			[]string{EnvMPIThreadsDisable}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.set(&c)
			if got := c.Unimplemented(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Unimplemented() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestUnimplementedFromEnv: a worker started by the launcher gets every knob
// in its environment, at its default where nothing was asked for; only the
// ones set to something else count.
func TestUnimplementedFromEnv(t *testing.T) {
	env := append(Default().Environ(), EnvMPIThreadsDisable+"=1", EnvRank+"=3", EnvSize+"=4")
	c, err := FromEnv(Lookup(env))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Unimplemented(), []string{EnvMPIThreadsDisable, EnvRank, EnvSize}; !reflect.DeepEqual(got, want) {
		t.Errorf("Unimplemented() = %q, want %q", got, want)
	}
}

func TestAgreed(t *testing.T) {
	c := Default()
	c.FusionThreshold, c.CycleTime, c.CacheCapacity = 64<<20, 2500*time.Microsecond, 0
	c.HierarchicalAllreduce, c.DynamicProcessSets = true, true
	c.EmbeddedAllgather = "bruck"
	c.Timeline, c.StallShutdownTime, c.LogLevel = "t.json", time.Minute, LevelDebug // rank-local
	want := []Setting{{EnvFusionThreshold, "67108864"}, {EnvCycleTime, "2.5"}, {EnvCacheCapacity, "0"},
		{EnvHierarchicalAllreduce, "1"}, {EnvHierarchicalAllgather, "0"}, {EnvDynamicProcessSets, "1"}, {EnvAutotune, "0"},
		{EnvAgreementSleepMax, "200"}, {EnvAgreementDoorbell, "1"}, {EnvStaticSchedule, "3"},
		{EnvEmbeddedAllgather, "bruck"}, {EnvEmbeddedAllreduce, ""}}
	if got := c.Agreed(); !reflect.DeepEqual(got, want) {
		t.Errorf("Agreed() = %v, want %v", got, want)
	}
}

func TestCheckAgreement(t *testing.T) {
	fusion := func(v string) Setting { return Setting{EnvFusionThreshold, v} }
	cycle := func(v string) Setting { return Setting{EnvCycleTime, v} }
	cache := func(v string) Setting { return Setting{EnvCacheCapacity, v} }
	tests := []struct {
		name  string
		ranks [][]Setting
		want  string // "" : agreement
		knobs []Disagreement
	}{
		{"one rank", [][]Setting{{fusion("1")}}, "", nil},
		{"two agree", [][]Setting{{fusion("1"), cycle("1")}, {fusion("1"), cycle("1")}}, "", nil},
		{"order does not matter", [][]Setting{{fusion("1"), cycle("1")}, {cycle("1"), fusion("1")}}, "", nil},
		{"two differ", [][]Setting{{fusion("67108864")}, {fusion("1048576")}},
			"ranks disagree on HOROVOD_FUSION_THRESHOLD: rank 0: 67108864, rank 1: 1048576 (every rank must be started with the same value)",
			[]Disagreement{{EnvFusionThreshold, []string{"67108864", "1048576"}}}},
		{"three ranks, the last differs", [][]Setting{{fusion("4"), cycle("1")}, {fusion("4"), cycle("1")}, {fusion("1"), cycle("1")}},
			"ranks disagree on HOROVOD_FUSION_THRESHOLD: ranks 0-1: 4, rank 2: 1 (every rank must be started with the same value)",
			[]Disagreement{{EnvFusionThreshold, []string{"4", "4", "1"}}}},
		{"three ranks, the middle differs", [][]Setting{{cycle("1")}, {cycle("2.5")}, {cycle("1")}},
			"ranks disagree on HOROVOD_CYCLE_TIME: rank 0: 1, rank 1: 2.5, rank 2: 1 (every rank must be started with the same value)",
			[]Disagreement{{EnvCycleTime, []string{"1", "2.5", "1"}}}},
		{"several knobs", [][]Setting{
			{fusion("1"), cycle("1"), cache("1024"), {"hvd.WithChunkBytes", "0"}},
			{fusion("2"), cycle("1"), cache("0"), {"hvd.WithChunkBytes", "0"}},
			{fusion("1"), cycle("1"), cache("0"), {"hvd.WithChunkBytes", "4"}}},
			"ranks disagree on HOROVOD_FUSION_THRESHOLD: rank 0: 1, rank 1: 2, rank 2: 1; " +
				"on HOROVOD_CACHE_CAPACITY: rank 0: 1024, ranks 1-2: 0; " +
				"on hvd.WithChunkBytes: ranks 0-1: 0, rank 2: 4 (every rank must be started with the same values)",
			[]Disagreement{
				{EnvFusionThreshold, []string{"1", "2", "1"}},
				{EnvCacheCapacity, []string{"1024", "0", "0"}},
				{"hvd.WithChunkBytes", []string{"0", "0", "4"}}}},
		{"a knob one rank lacks", [][]Setting{{fusion("1")}, {fusion("1"), cycle("1")}},
			"ranks disagree on HOROVOD_CYCLE_TIME: rank 0: (absent), rank 1: 1 (every rank must be started with the same value)",
			[]Disagreement{{EnvCycleTime, []string{Absent, "1"}}}},
		{"odd values quoted", [][]Setting{{{"X", ""}}, {{"X", "a b"}}},
			`ranks disagree on X: rank 0: "", rank 1: "a b" (every rank must be started with the same value)`,
			[]Disagreement{{"X", []string{"", "a b"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckAgreement(tt.ranks)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CheckAgreement = %v, want nil", err)
				}
				return
			}
			var ae *AgreementError
			if !errors.As(err, &ae) {
				t.Fatalf("CheckAgreement = %v, want an *AgreementError", err)
			}
			if err.Error() != tt.want {
				t.Errorf("message\n got %s\nwant %s", err, tt.want)
			}
			if !reflect.DeepEqual(ae.Knobs, tt.knobs) {
				t.Errorf("Knobs = %v, want %v", ae.Knobs, tt.knobs)
			}
		})
	}
}

// TestCheckAgreementManyRanks: the message stays bounded when the values
// alternate across many ranks.
func TestCheckAgreementManyRanks(t *testing.T) {
	enc := make([][]Setting, 100)
	for r := range enc {
		v := "1"
		if r%2 == 1 {
			v = "2"
		}
		enc[r] = []Setting{{EnvFusionThreshold, v}}
	}
	err := CheckAgreement(enc)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if !strings.Contains(msg, "rank 15: 2, and 84 more ranks (every rank") || len(msg) > 400 {
		t.Errorf("message %q", msg)
	}
}
