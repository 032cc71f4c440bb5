package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDefault(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	want := map[string]string{
		EnvFusionThreshold:   "4194304",
		EnvCycleTime:         "1",
		EnvCacheCapacity:     "1024",
		EnvStallCheckTime:    "60",
		EnvStallShutdownTime: "0",
		EnvLogLevel:          "WARNING",
		EnvStallCheckDisable: "0",
		EnvTimeline:          "",
		EnvAutotuneNoise:     "0.8",
		EnvGlooTimeout:       "30",
		EnvAgreementSleepMax: "200",
		EnvAgreementDoorbell: "1",
		EnvStaticSchedule:    "3",
	}
	got, _ := FromEnv(func(string) (string, bool) { return "", false })
	if !reflect.DeepEqual(got, c) {
		t.Errorf("FromEnv(empty) = %+v, want Default() %+v", got, c)
	}
	look := Lookup(c.Environ())
	for k, w := range want {
		if v, _ := look(k); v != w {
			t.Errorf("Default().Environ() %s=%q, want %q", k, v, w)
		}
	}
	for _, k := range []string{EnvRank, EnvSize, EnvHostname, EnvLauncher, EnvController, EnvCPUOperations,
		EnvRendezvousAddr, EnvRendezvousPort, EnvGlooIface, EnvGlooAddr, EnvGlooSocketDir, EnvSecret} {
		if _, ok := look(k); ok {
			t.Errorf("Default().Environ() sets %s, want it left out while unset", k)
		}
	}
}

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want func(*Config)
	}{
		{"fusion", []string{"HOROVOD_FUSION_THRESHOLD=33554432"}, func(c *Config) { c.FusionThreshold = 32 << 20 }},
		{"fusion off", []string{"HOROVOD_FUSION_THRESHOLD=0"}, func(c *Config) { c.FusionThreshold = 0 }},
		{"cycle whole ms", []string{"HOROVOD_CYCLE_TIME=5"}, func(c *Config) { c.CycleTime = 5 * time.Millisecond }},
		{"cycle fractional ms", []string{"HOROVOD_CYCLE_TIME=0.5"}, func(c *Config) { c.CycleTime = 500 * time.Microsecond }},
		{"cycle exponent", []string{"HOROVOD_CYCLE_TIME=2.5e-1"}, func(c *Config) { c.CycleTime = 250 * time.Microsecond }},
		{"cycle spaces", []string{"HOROVOD_CYCLE_TIME= 3 "}, func(c *Config) { c.CycleTime = 3 * time.Millisecond }},
		{"cache", []string{"HOROVOD_CACHE_CAPACITY=0"}, func(c *Config) { c.CacheCapacity = 0 }},
		{"timeline", []string{"HOROVOD_TIMELINE=/tmp/t.json", "HOROVOD_TIMELINE_MARK_CYCLES=1"},
			func(c *Config) { c.Timeline = "/tmp/t.json"; c.TimelineMarkCycles = true }},
		{"stall", []string{"HOROVOD_STALL_CHECK_TIME_SECONDS=2", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=5"},
			func(c *Config) { c.StallCheckTime = 2 * time.Second; c.StallShutdownTime = 5 * time.Second }},
		{"stall fractional", []string{"HOROVOD_STALL_CHECK_TIME_SECONDS=0.25"}, func(c *Config) { c.StallCheckTime = 250 * time.Millisecond }},
		{"stall off", []string{"HOROVOD_STALL_CHECK_DISABLE=true"}, func(c *Config) { c.StallCheckDisable = true }},
		{"bool as integer", []string{"HOROVOD_AUTOTUNE=2"}, func(c *Config) { c.Autotune = true }},
		{"level lower case", []string{"HOROVOD_LOG_LEVEL=debug"}, func(c *Config) { c.LogLevel = LevelDebug }},
		{"level warn", []string{"HOROVOD_LOG_LEVEL=WARN"}, func(c *Config) { c.LogLevel = LevelWarning }},
		{"hierarchical", []string{"HOROVOD_HIERARCHICAL_ALLREDUCE=1", "HOROVOD_HIERARCHICAL_ALLGATHER=0"},
			func(c *Config) { c.HierarchicalAllreduce = true }},
		{"mpi threads", []string{"HOROVOD_MPI_THREADS_DISABLE=1"}, func(c *Config) { c.MPIThreadsDisable = true }},
		{"autotune", []string{"HOROVOD_AUTOTUNE=1", "HOROVOD_AUTOTUNE_LOG=at.csv", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES=1",
			"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=7", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES=9", "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=0.1"},
			func(c *Config) {
				c.Autotune, c.AutotuneLog, c.AutotuneWarmupSamples = true, "at.csv", 1
				c.AutotuneStepsPerSample, c.AutotuneMaxSamples, c.AutotuneNoise = 7, 9, 0.1
			}},
		{"placement", []string{"HOROVOD_RANK=3", "HOROVOD_SIZE=4", "HOROVOD_LOCAL_RANK=1", "HOROVOD_LOCAL_SIZE=2",
			"HOROVOD_CROSS_RANK=1", "HOROVOD_CROSS_SIZE=2", "HOROVOD_HOSTNAME=h2", "GOHOROVOD_LAUNCHER=12:34:b:pid:[5]"},
			func(c *Config) {
				c.Rank, c.Size, c.LocalRank, c.LocalSize, c.CrossRank, c.CrossSize = 3, 4, 1, 2, 1, 2
				c.Hostname, c.Launcher = "h2", "12:34:b:pid:[5]"
			}},
		{"gloo", []string{"HOROVOD_CONTROLLER=Gloo", "HOROVOD_CPU_OPERATIONS=gloo", "HOROVOD_GLOO_RENDEZVOUS_ADDR=10.0.0.1",
			"HOROVOD_GLOO_RENDEZVOUS_PORT=4242", "HOROVOD_GLOO_TIMEOUT_SECONDS=2.5", "HOROVOD_GLOO_IFACE=eth1",
			"GOHOROVOD_GLOO_ADDR=10.0.0.7", "GOHOROVOD_GLOO_SOCKET_DIR=/run/user/1000/ghv-42", "GOHOROVOD_SECRET=00112233445566778899aabbccddeeff"},
			func(c *Config) {
				c.Controller, c.CPUOperations, c.RendezvousAddr, c.RendezvousPort = "gloo", "gloo", "10.0.0.1", 4242
				c.GlooTimeout, c.GlooIface, c.GlooAddr = 2500*time.Millisecond, "eth1", "10.0.0.7"
				c.GlooSocketDir = "/run/user/1000/ghv-42"
				c.Secret = "00112233445566778899aabbccddeeff"
			}},
		{"mpi", []string{"HOROVOD_CONTROLLER=MPI"}, func(c *Config) { c.Controller = "mpi" }},
		{"agreement sleep", []string{"GOHOROVOD_AGREEMENT_SLEEP_MAX=50.5"}, func(c *Config) { c.AgreementSleepMax = 50500 * time.Nanosecond }},
		{"agreement blocking", []string{"GOHOROVOD_AGREEMENT_SLEEP_MAX=0"}, func(c *Config) { c.AgreementSleepMax = 0 }},
		{"agreement doorbell off", []string{"GOHOROVOD_AGREEMENT_DOORBELL=0"}, func(c *Config) { c.AgreementDoorbell = false }},
		{"static schedule off", []string{"GOHOROVOD_STATIC_SCHEDULE=0"}, func(c *Config) { c.StaticSchedule = 0 }},
		{"static schedule", []string{"GOHOROVOD_STATIC_SCHEDULE=5"}, func(c *Config) { c.StaticSchedule = 5 }},
		{"embedded allgather", []string{"GOHOROVOD_EMBEDDED_ALLGATHER= Bruck"}, func(c *Config) { c.EmbeddedAllgather = "bruck" }},
		{"embedded allreduce", []string{"GOHOROVOD_EMBEDDED_ALLREDUCE=ring"}, func(c *Config) { c.EmbeddedAllreduce = "ring" }},
		{"embedded auto", []string{"GOHOROVOD_EMBEDDED_ALLREDUCE=AUTO"}, func(c *Config) { c.EmbeddedAllreduce = AlgoAuto }},
		{"ipv6 rendezvous", []string{"HOROVOD_GLOO_RENDEZVOUS_ADDR=::1", "HOROVOD_GLOO_RENDEZVOUS_PORT=1"},
			func(c *Config) { c.RendezvousAddr, c.RendezvousPort = "::1", 1 }},
		{"empty means default", []string{"HOROVOD_CYCLE_TIME=", "HOROVOD_RANK=", "GOHOROVOD_SECRET=", "HOROVOD_CONTROLLER="}, func(c *Config) {}},
		{"unrelated ignored", []string{"PATH=/bin", "HOROVOD_UNKNOWN=1"}, func(c *Config) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromEnv(Lookup(tt.env))
			if err != nil {
				t.Fatalf("FromEnv(%q) error %v", tt.env, err)
			}
			want := Default()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("FromEnv(%q)\n got %+v\nwant %+v", tt.env, got, want)
			}
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	tests := []struct {
		env      string
		wantVar  string
		wantText string
	}{
		{"HOROVOD_FUSION_THRESHOLD=-1", EnvFusionThreshold, "must be >= 0"},
		{"HOROVOD_FUSION_THRESHOLD=64MB", EnvFusionThreshold, "not a whole number of bytes"},
		{"HOROVOD_CYCLE_TIME=-0.5", EnvCycleTime, "must be >= 0"},
		{"HOROVOD_CYCLE_TIME=fast", EnvCycleTime, "not a number of milliseconds"},
		{"HOROVOD_CYCLE_TIME=1e300", EnvCycleTime, "too large"},
		{"HOROVOD_CACHE_CAPACITY=-5", EnvCacheCapacity, "must be >= 0"},
		{"HOROVOD_STALL_CHECK_TIME_SECONDS=-1", EnvStallCheckTime, "must be >= 0"},
		{"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=soon", EnvStallShutdownTime, "not a number of seconds"},
		{"HOROVOD_STALL_CHECK_DISABLE=maybe", EnvStallCheckDisable, "not a boolean"},
		{"HOROVOD_LOG_LEVEL=LOUD", EnvLogLevel, "not a log level"},
		{"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=1.5", EnvAutotuneNoise, "must be in [0, 1]"},
		{"HOROVOD_AUTOTUNE_WARMUP_SAMPLES=-3", EnvAutotuneWarmupSamples, "must be >= 0"},
		{"HOROVOD_RANK=-1", EnvRank, "must be >= 0"},
		{"HOROVOD_SIZE=0", EnvSize, "must be >= 1"},
		{"HOROVOD_RANK=4\x00HOROVOD_SIZE=4", EnvRank, "must be less than HOROVOD_SIZE=4"},
		{"HOROVOD_LOCAL_RANK=x", EnvLocalRank, "not a whole number"},
		{"HOROVOD_CONTROLLER=nccl", EnvController, `must be "mpi" or "gloo"`},
		{"HOROVOD_CPU_OPERATIONS=ccl", EnvCPUOperations, `must be "mpi" or "gloo"`},
		{"HOROVOD_GLOO_RENDEZVOUS_PORT=0", EnvRendezvousPort, "not a port number"},
		{"HOROVOD_GLOO_RENDEZVOUS_PORT=65536", EnvRendezvousPort, "not a port number"},
		{"HOROVOD_GLOO_RENDEZVOUS_ADDR=h", EnvRendezvousPort, "must be set with HOROVOD_GLOO_RENDEZVOUS_ADDR=h"},
		{"HOROVOD_GLOO_RENDEZVOUS_PORT=80", EnvRendezvousAddr, "must be set with HOROVOD_GLOO_RENDEZVOUS_PORT=80"},
		{"HOROVOD_GLOO_TIMEOUT_SECONDS=-1", EnvGlooTimeout, "must be >= 0"},
		{"GOHOROVOD_AGREEMENT_SLEEP_MAX=-1", EnvAgreementSleepMax, "must be >= 0"},
		{"GOHOROVOD_STATIC_SCHEDULE=-1", EnvStaticSchedule, "must be >= 0"},
		{"GOHOROVOD_EMBEDDED_ALLGATHER=doubling", EnvEmbeddedAllgather, "must be one of auto, direct, bruck, ring"},
		{"GOHOROVOD_EMBEDDED_ALLREDUCE=tree", EnvEmbeddedAllreduce, "must be one of auto, doubling, ring"},
		{"GOHOROVOD_SECRET=zz00112233445566778899aabbccddee", EnvSecret, "not hex"},
		{"GOHOROVOD_SECRET=0011", EnvSecret, "2 bytes, want at least 16"},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			_, err := FromEnv(Lookup(strings.Split(tt.env, "\x00")))
			var ee *EnvError
			if !errors.As(err, &ee) {
				t.Fatalf("FromEnv(%q) = %v, want an *EnvError", tt.env, err)
			}
			if ee.Var != tt.wantVar || !strings.Contains(err.Error(), tt.wantText) || !strings.Contains(err.Error(), tt.wantVar) {
				t.Errorf("FromEnv(%q) = %q (var %s), want var %s and text %q", tt.env, err, ee.Var, tt.wantVar, tt.wantText)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Config)
		wantVar string
	}{
		{"negative fusion", func(c *Config) { c.FusionThreshold = -1 }, EnvFusionThreshold},
		{"negative cycle", func(c *Config) { c.CycleTime = -time.Millisecond }, EnvCycleTime},
		{"negative cache", func(c *Config) { c.CacheCapacity = -1 }, EnvCacheCapacity},
		{"negative stall", func(c *Config) { c.StallCheckTime = -time.Second }, EnvStallCheckTime},
		{"negative shutdown", func(c *Config) { c.StallShutdownTime = -time.Second }, EnvStallShutdownTime},
		{"bad level", func(c *Config) { c.LogLevel = 17 }, EnvLogLevel},
		{"NaN noise", func(c *Config) { c.AutotuneNoise = math.NaN() }, EnvAutotuneNoise},
		{"rank past size", func(c *Config) { c.Rank, c.Size = 2, 2 }, EnvRank},
		{"local rank past size", func(c *Config) { c.LocalRank, c.LocalSize = 5, 1 }, EnvLocalRank},
		{"cross size zero", func(c *Config) { c.CrossSize = 0 }, EnvCrossSize},
		{"controller upper case", func(c *Config) { c.Controller = "GLOO" }, EnvController},
		{"cpu operations", func(c *Config) { c.CPUOperations = "nccl" }, EnvCPUOperations},
		{"port too large", func(c *Config) { c.RendezvousAddr, c.RendezvousPort = "h", 1<<16 }, EnvRendezvousPort},
		{"port without address", func(c *Config) { c.RendezvousPort = 5 }, EnvRendezvousAddr},
		{"negative gloo timeout", func(c *Config) { c.GlooTimeout = -1 }, EnvGlooTimeout},
		{"short secret", func(c *Config) { c.Secret = "00" }, EnvSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mod(&c)
			var ee *EnvError
			if err := c.Validate(); !errors.As(err, &ee) || ee.Var != tt.wantVar {
				t.Errorf("Validate() = %v, want an *EnvError for %s", err, tt.wantVar)
			}
		})
	}
	// Horovod accepts a shutdown time below the warning time (and then never
	// shuts down); so do we.
	c := Default()
	c.StallCheckTime, c.StallShutdownTime = 10*time.Second, 5*time.Second
	if err := c.Validate(); err != nil {
		t.Errorf("shutdown < warning: Validate() = %v, want nil", err)
	}
}

func TestEnvironNames(t *testing.T) {
	c := Default()
	c.Rank, c.Size, c.LocalRank, c.LocalSize, c.CrossRank, c.CrossSize, c.Hostname = 0, 1, 0, 1, 0, 1, "h"
	c.Launcher = "1:2:b:pid:[3]"
	c.Controller, c.CPUOperations, c.RendezvousAddr, c.RendezvousPort = "gloo", "gloo", "h", 1
	c.GlooIface, c.GlooAddr, c.Secret = "lo", "127.0.0.1", "00112233445566778899aabbccddeeff"
	c.GlooSocketDir = "/run/user/1000/ghv-1"
	c.Elastic, c.DynamicProcessSets = true, true
	env := c.Environ()
	names := Names()
	if len(env) != len(names) {
		t.Fatalf("Environ() has %d entries, Names() %d", len(env), len(names))
	}
	seen := map[string]bool{}
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k != names[i] {
			t.Errorf("Environ()[%d] is %s, Names()[%d] is %s", i, k, i, names[i])
		}
		if seen[k] || !strings.HasPrefix(k, "HOROVOD_") && !strings.HasPrefix(k, "GOHOROVOD_") {
			t.Errorf("variable %s repeated or not (GO)HOROVOD_-prefixed", k)
		}
		seen[k] = true
	}
}

func TestDurationFormat(t *testing.T) {
	tests := []struct {
		d    time.Duration
		unit time.Duration
		want string
	}{
		{time.Millisecond, time.Millisecond, "1"},
		{1500 * time.Microsecond, time.Millisecond, "1.5"},
		{time.Nanosecond, time.Millisecond, "0.000001"},
		{90 * time.Second, time.Second, "90"},
		{time.Duration(math.MaxInt64), time.Second, "9223372036.854775807"},
		{0, time.Second, "0"},
	}
	for _, tt := range tests {
		s := formatDuration(tt.d, tt.unit)
		if s != tt.want {
			t.Errorf("formatDuration(%v, %v) = %q, want %q", tt.d, tt.unit, s, tt.want)
		}
		back, err := parseDuration(s, tt.unit, "x")
		if err != nil || back != tt.d {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", s, back, err, tt.d)
		}
	}
}

func TestLogLevel(t *testing.T) {
	for l := LevelTrace; l <= LevelFatal; l++ {
		got, err := ParseLogLevel(strings.ToLower(l.String()))
		if err != nil || got != l {
			t.Errorf("ParseLogLevel(%q) = %v, %v", strings.ToLower(l.String()), got, err)
		}
	}
	if s := LogLevel(9).String(); s != "LogLevel(9)" {
		t.Errorf("LogLevel(9).String() = %q", s)
	}
}

// roundTrip checks FromEnv(Lookup(c.Environ())) == c and that Environ is a
// fixed point of the pair.
func roundTrip(t *testing.T, c Config) {
	t.Helper()
	env := c.Environ()
	got, err := FromEnv(Lookup(env))
	if err != nil {
		t.Fatalf("FromEnv(Environ(%+v)) error %v (env %q)", c, err, env)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip changed the config\n  in %+v\n out %+v\n env %q", c, got, env)
	}
	if again := got.Environ(); !reflect.DeepEqual(again, env) {
		t.Fatalf("Environ not stable: %q then %q", env, again)
	}
}

func TestRoundTripExamples(t *testing.T) {
	c := Default()
	roundTrip(t, c)
	c.FusionThreshold, c.CycleTime, c.CacheCapacity = 0, 3700*time.Microsecond+1, 0
	c.Timeline, c.TimelineMarkCycles, c.StallCheckDisable = " odd = name\n", true, true
	c.StallCheckTime, c.StallShutdownTime, c.LogLevel = 1500*time.Millisecond, 0, LevelTrace
	c.Autotune, c.AutotuneLog, c.AutotuneNoise = true, "log.csv", 1.0/3
	c.Rank, c.Size, c.Hostname, c.Launcher = 0, 1, "x", "1:2:b:pid:[3]"
	roundTrip(t, c)
	c.Controller, c.CPUOperations, c.RendezvousAddr, c.RendezvousPort = "gloo", "mpi", "fe80::1%eth0", 65535
	c.GlooTimeout, c.GlooIface, c.GlooAddr, c.Secret = 0, "eth0", "h.example", "00112233445566778899AABBCCDDEEFF00"
	roundTrip(t, c)
}

// TestSecretNeverPrinted: a Config printed with any verb, and the error
// for a malformed secret, leave the key out.
func TestSecretNeverPrinted(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	c := Default()
	c.Secret = key
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		if s := fmt.Sprintf(verb, c); strings.Contains(s, key) || strings.Contains(s, "30313233") {
			t.Errorf("%s shows the secret: %s", verb, s)
		}
	}
	if s := fmt.Sprint(c.Secret); s != "[redacted]" {
		t.Errorf("Secret prints as %q", s)
	}
	if b, err := c.Secret.Bytes(); err != nil || len(b) != 16 {
		t.Errorf("Bytes() = %x, %v", b, err)
	}
	_, err := FromEnv(Lookup([]string{EnvSecret + "=" + key + "z"}))
	if err == nil || strings.Contains(err.Error(), key) {
		t.Errorf("FromEnv error shows the secret: %v", err)
	}
	c.Secret = Secret(key[:6])
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), key[:6]) {
		t.Errorf("Validate error shows the secret: %v", err)
	}
}

func TestGloo(t *testing.T) {
	c := Default()
	if c.Gloo() || c.RendezvousAddress() != "" {
		t.Error("the default selects Gloo")
	}
	c.RendezvousAddr, c.RendezvousPort = "::1", 99
	if !c.Gloo() || c.RendezvousAddress() != "[::1]:99" {
		t.Errorf("Gloo() = %v, RendezvousAddress() = %q", c.Gloo(), c.RendezvousAddress())
	}
	c.Controller = ControllerMPI
	if c.Gloo() {
		t.Error("HOROVOD_CONTROLLER=mpi with a rendezvous address selects Gloo")
	}
	c = Default()
	c.Controller = ControllerGloo
	if !c.Gloo() {
		t.Error("HOROVOD_CONTROLLER=gloo does not select Gloo")
	}
}

// FuzzRoundTrip builds a Config from arbitrary field values; every one that
// validates must survive Environ then FromEnv unchanged.
func FuzzRoundTrip(f *testing.F) {
	f.Add(int64(64<<20), int64(time.Millisecond), 1024, "", uint16(0), int64(60e9), int64(0), int8(3), "", 3, 10, 20, 0.8, -1, -1, -1, -1, -1, -1, "",
		"", "", "", 0, int64(30e9), "", "", "")
	f.Add(int64(0), int64(1), 0, "t.json", uint16(0xffff), int64(1), int64(math.MaxInt64), int8(0), "a=b", 0, 0, 0, 0.0, 0, 1, 0, 1, 0, 1, "h",
		"gloo", "gloo", "10.1.2.3", 29500, int64(1), "eth0", "10.1.2.4", "00112233445566778899aabbccddeeff")
	f.Fuzz(func(t *testing.T, fusion, cycle int64, cache int, timeline string, flags uint16, stall, shutdown int64, level int8,
		atLog string, warm, steps, maxS int, noise float64, rank, size, lrank, lsize, crank, csize int, host string,
		controller, cpuOps, raddr string, rport int, glooTimeout int64, iface, gaddr, secret string) {
		bit := func(i uint) bool { return flags&(1<<i) != 0 }
		c := Config{
			FusionThreshold: fusion, CycleTime: time.Duration(cycle), CacheCapacity: cache,
			Timeline: timeline, TimelineMarkCycles: bit(0), StallCheckDisable: bit(1),
			StallCheckTime: time.Duration(stall), StallShutdownTime: time.Duration(shutdown),
			LogLevel: LogLevel(level), LogHideTime: bit(2), HierarchicalAllreduce: bit(3),
			HierarchicalAllgather: bit(4), MPIThreadsDisable: bit(5), Autotune: bit(6),
			AutotuneLog: atLog, AutotuneWarmupSamples: warm, AutotuneStepsPerSample: steps,
			AutotuneMaxSamples: maxS, AutotuneNoise: noise,
			Rank: rank, Size: size, LocalRank: lrank, LocalSize: lsize, CrossRank: crank, CrossSize: csize,
			Hostname: host, Controller: controller, CPUOperations: cpuOps, RendezvousAddr: raddr, RendezvousPort: rport,
			GlooTimeout: time.Duration(glooTimeout), GlooIface: iface, GlooAddr: gaddr, Secret: Secret(secret),
			Elastic: bit(7), DynamicProcessSets: bit(8),
		}
		if c.Validate() != nil {
			return
		}
		roundTrip(t, c)
	})
}

// FuzzFromEnv feeds arbitrary values to a few variables: FromEnv must not
// panic, and whatever it accepts must round-trip.
func FuzzFromEnv(f *testing.F) {
	f.Add("1", "0.5", "60", "debug", "3", "gloo", "h", "1", " 00112233445566778899aabbccddeeff ")
	f.Add("-1", "1e-3", "x", "", "", "MPI", "", "", "")
	f.Add("99999999999999999999", ".", "1.0000000001", "WARN", "+2", "x", "::1", "+80", "0g")
	f.Fuzz(func(t *testing.T, fusion, cycle, stall, level, rank, controller, raddr, rport, secret string) {
		env := map[string]string{EnvFusionThreshold: fusion, EnvCycleTime: cycle,
			EnvStallCheckTime: stall, EnvLogLevel: level, EnvRank: rank,
			EnvController: controller, EnvRendezvousAddr: raddr, EnvRendezvousPort: rport, EnvSecret: secret}
		c, err := FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err != nil {
			var ee *EnvError
			if !errors.As(err, &ee) || !strings.Contains(err.Error(), ee.Var) {
				t.Fatalf("FromEnv error %v does not name the variable", err)
			}
			return
		}
		roundTrip(t, c)
	})
}
