package launch

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/gohorovod/gohorovod/internal/launch/elastic"
	"github.com/gohorovod/gohorovod/runtime/config"
)

func TestParseForms(t *testing.T) {
	tests := []struct {
		args    []string
		np      int
		hosts   string
		command []string
	}{
		{[]string{"-np", "4", "./train"}, 4, "", []string{"./train"}},
		{[]string{"-np=4", "./train"}, 4, "", []string{"./train"}},
		{[]string{"--num-proc", "4", "./train"}, 4, "", []string{"./train"}},
		{[]string{"--np", "4", "./train"}, 4, "", []string{"./train"}},
		{[]string{"-np", "2", "-H", "a:1,b:1", "./train", "-np", "9", "-H", "x"}, 2, "a:1,b:1", []string{"./train", "-np", "9", "-H", "x"}},
		{[]string{"-np", "2", "--hosts=a:2", "--", "prog", "--verbose"}, 2, "a:2", []string{"prog", "--verbose"}},
		{[]string{"-H", "a:2", "-np", "2", "--verbose", "prog"}, 2, "a:2", []string{"prog"}},
	}
	for _, tt := range tests {
		o, err := Parse(tt.args, io.Discard)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.args, err)
			continue
		}
		if o.NP != tt.np || o.Hosts != tt.hosts || !reflect.DeepEqual(o.Command, tt.command) {
			t.Errorf("Parse(%q) = np %d hosts %q command %q; want %d %q %q", tt.args, o.NP, o.Hosts, o.Command, tt.np, tt.hosts, tt.command)
		}
	}
	o, err := Parse([]string{"-np", "1", "-p", "2222", "-i", "key", "--network-interface", "eth0", "--network-interfaces=ib0,ib1",
		"-hostfile", "hf", "--mpi-args=--mca btl self", "--output-filename", "out", "--start-timeout", "5", "prog"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.SSHPort != 2222 || o.SSHIdentity != "key" || !reflect.DeepEqual(o.NICs, []string{"eth0", "ib0", "ib1"}) ||
		o.Hostfile != "hf" || o.MPIArgs != "--mca btl self" || o.OutputFilename != "out" || o.StartTimeout != 5 {
		t.Errorf("Parse: %+v", o)
	}
	for _, args := range [][]string{{"--version"}, {"-v"}, {"--check-build"}, {"-cb"}} {
		if _, err := Parse(args, io.Discard); err != nil {
			t.Errorf("Parse(%q) = %v: needs no program", args, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"-np", "0", "prog"}, "-np must be at least 1 (got 0)"},
		{[]string{"-np", "-2", "prog"}, "-np must be at least 1 (got -2)"},
		{[]string{"--num-proc=-1", "prog"}, "-np must be at least 1 (got -1)"},
		{[]string{"-np", "2"}, "no program given"},
		{[]string{"-np", "2", "--frobnicate", "prog"}, "unknown flag: --frobnicate"},
		{[]string{"-np", "x", "prog"}, "invalid argument \"x\""},
		{[]string{"-np", "2", "-H", "a:2", "--hostfile", "f", "prog"}, "-H/--hosts and --hostfile both given"},
		{[]string{"-np", "2", "--fusion-threshold-mb", "-1", "prog"}, "--fusion-threshold-mb=-1 must be >= 0"},
		{[]string{"-np", "2", "--cycle-time-ms=-0.5", "prog"}, "--cycle-time-ms=-0.5 must be >= 0"},
		{[]string{"-np", "2", "--cache-capacity=-1", "prog"}, "--cache-capacity=-1 must be >= 0"},
		{[]string{"-np", "2", "--stall-check-warning-time-seconds=-1", "prog"}, "must be >= 0"},
		{[]string{"-np", "2", "--stall-check-shutdown-time-seconds=-1", "prog"}, "must be >= 0"},
		{[]string{"-np", "2", "--log-level", "LOUD", "prog"}, "--log-level=LOUD"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.args, io.Discard)
		if err == nil || !IsUsage(err) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Parse(%q) error = %v, want a usage error containing %q", tt.args, err, tt.wantErr)
		}
	}
}

func TestApplyTo(t *testing.T) {
	env := config.Default()
	env.CycleTime = 7 * time.Millisecond // from the caller's environment
	env.CacheCapacity = 5
	o, err := Parse([]string{"-np", "2", "--fusion-threshold-mb", "32", "--cycle-time-ms", "2.5", "--timeline-filename", "tl.json",
		"--timeline-mark-cycles", "--no-stall-check", "--stall-check-warning-time-seconds", "2",
		"--stall-check-shutdown-time-seconds", "5", "--log-level", "debug", "--mpi-threads-disable",
		"--hierarchical-allreduce", "--autotune", "--autotune-log-file", "at.csv", "--log-without-timestamp",
		"--autotune-warmup-samples", "0", "--autotune-steps-per-sample", "4", "--autotune-bayes-opt-max-samples", "9",
		"--autotune-gaussian-process-noise", "0.25", "prog"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got, err := o.ApplyTo(env)
	if err != nil {
		t.Fatal(err)
	}
	want := env
	want.FusionThreshold = 32 << 20
	want.CycleTime = 2500 * time.Microsecond
	want.Timeline, want.TimelineMarkCycles, want.StallCheckDisable = "tl.json", true, true
	want.StallCheckTime, want.StallShutdownTime = 2*time.Second, 5*time.Second
	want.LogLevel, want.MPIThreadsDisable, want.HierarchicalAllreduce = config.LevelDebug, true, true
	want.Autotune, want.AutotuneLog, want.LogHideTime = true, "at.csv", true
	want.AutotuneWarmupSamples, want.AutotuneStepsPerSample, want.AutotuneMaxSamples, want.AutotuneNoise = 0, 4, 9, 0.25
	if got != want {
		t.Errorf("ApplyTo\n got %+v\nwant %+v", got, want)
	}
	if got.CacheCapacity != 5 {
		t.Errorf("a knob not given on the command line lost its environment value")
	}
	// A flag given with its default value still overrides the environment.
	o, _ = Parse([]string{"-np", "1", "--cycle-time-ms", "1", "prog"}, io.Discard)
	if got, _ := o.ApplyTo(env); got.CycleTime != time.Millisecond {
		t.Errorf("--cycle-time-ms 1 over HOROVOD_CYCLE_TIME=7 gave %v", got.CycleTime)
	}
}

// TestHelp checks --help's placeholders: each flag that takes a value
// names what it takes (FILE, SECONDS, ...), not the Go type behind it, and
// the hostfile's line format is described in the text.
func TestHelp(t *testing.T) {
	var out strings.Builder
	if _, err := Parse([]string{"--help"}, &out); err != pflag.ErrHelp {
		t.Fatalf("Parse(--help) = %v, want pflag.ErrHelp", err)
	}
	help := out.String()
	for _, line := range strings.Split(help, "\n") {
		fields := strings.Fields(line)
		for i, f := range fields {
			if !strings.HasPrefix(f, "--") || i+1 >= len(fields) {
				continue
			}
			switch fields[i+1] {
			case "string", "strings", "int", "float", "float64", "bool", "host":
				t.Errorf("flag %s shows the placeholder %q: %q", f, fields[i+1], line)
			}
			break
		}
	}
	for _, want := range []string{"--hostfile FILE ", "one line per host: host slots=N", "--start-timeout SECONDS ",
		"--timeline-filename FILE ", "--log-level LEVEL "} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q:\n%s", want, help)
		}
	}
}

func TestGlooOptions(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gloo", "--mpi", "-np", "2", "./t"}, "--gloo and --mpi both given"},
		{[]string{"--gloo", "--mpi-args=-v", "-np", "2", "./t"}, "--mpi-args has no effect with --gloo"},
		{[]string{"--gloo-timeout-seconds", "-1", "-np", "2", "./t"}, "--gloo-timeout-seconds=-1 must be >= 0"},
	} {
		if _, err := Parse(tc.args, io.Discard); !IsUsage(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want %q", tc.args, err, tc.want)
		}
	}
	o, err := Parse([]string{"--gloo", "--gloo-timeout-seconds", "2.5", "-np", "2", "./t"}, io.Discard)
	if err != nil || !o.Gloo || o.MPI {
		t.Fatalf("Parse = %+v, %v", o, err)
	}
	c, err := o.ApplyTo(config.Default())
	if err != nil || c.GlooTimeout != 2500*time.Millisecond {
		t.Errorf("ApplyTo: GlooTimeout %v, %v", c.GlooTimeout, err)
	}
}

func TestElasticOptions(t *testing.T) {
	tests := []struct {
		args    []string
		elastic bool
		check   func(o *Options) bool
	}{
		{[]string{"-np", "2", "./t"}, false, func(o *Options) bool { return o.MinNP == 0 && o.MaxNP == 0 && o.HostDiscoveryScript == "" }},
		{[]string{"-np", "2", "--host-discovery-script", "./discover hosts.sh", "./t"}, true,
			func(o *Options) bool { return o.HostDiscoveryScript == "./discover hosts.sh" }},
		{[]string{"-np", "2", "--host-discovery-script=./d.sh", "--slots-per-host", "4", "./t"}, true,
			func(o *Options) bool { return o.HostDiscoveryScript == "./d.sh" && o.SlotsPerHost == 4 }},
		{[]string{"-np", "4", "--min-np", "2", "-H", "a:2,b:2", "./t"}, true,
			func(o *Options) bool { return o.MinNP == 2 && o.Hosts == "a:2,b:2" }},
		{[]string{"-np", "4", "--max-np", "8", "--hostfile", "hf", "./t"}, true, func(o *Options) bool { return o.MaxNP == 8 }},
		{[]string{"-np", "4", "--min-np=4", "--max-np=4", "--gloo", "./t"}, true, func(o *Options) bool { return o.MinNP == 4 && o.MaxNP == 4 }},
		{[]string{"-np", "2", "--min-np", "1", "--elastic-timeout", "2.5", "--reset-limit", "3", "./t"}, true,
			func(o *Options) bool { return o.ElasticTimeout == 2.5 && o.ResetLimit == 3 }},
		{[]string{"-np", "2", "--min-np", "1", "--reset-limit", "0", "./t"}, true, func(o *Options) bool { return o.ResetLimit == 0 }},
		// --blacklist-cooldown-range: horovodrun's two arguments, or one.
		{[]string{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "10", "100", "./t", "5"}, true,
			func(o *Options) bool {
				return o.BlacklistCooldownRange == [2]float64{10, 100} && reflect.DeepEqual(o.Command, []string{"./t", "5"})
			}},
		{[]string{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range=10,100", "./t"}, true,
			func(o *Options) bool { return o.BlacklistCooldownRange == [2]float64{10, 100} }},
		{[]string{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "0.5,0.5", "./t"}, true,
			func(o *Options) bool { return o.BlacklistCooldownRange == [2]float64{0.5, 0.5} }},
		{[]string{"--blacklist-cooldown-range", "1.5", "30", "-np", "2", "--min-np", "1", "./t"}, true,
			func(o *Options) bool { return o.BlacklistCooldownRange == [2]float64{1.5, 30} && o.NP == 2 }},
		// The program's own arguments are the program's.
		{[]string{"-np", "2", "./t", "--min-np", "1", "--blacklist-cooldown-range", "1", "2"}, false,
			func(o *Options) bool { return len(o.Command) == 6 && o.BlacklistCooldownRange == [2]float64{} }},
	}
	for _, tt := range tests {
		o, err := Parse(tt.args, io.Discard)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.args, err)
			continue
		}
		if o.Elastic() != tt.elastic {
			t.Errorf("Parse(%q).Elastic() = %v, want %v", tt.args, o.Elastic(), tt.elastic)
		}
		if !tt.check(o) {
			t.Errorf("Parse(%q) = %+v", tt.args, o)
		}
	}
}

func TestElasticOptionErrors(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"-np", "2", "--min-np", "1", "--mpi", "./t"}, "--mpi with elastic mode"},
		{[]string{"-np", "2", "--host-discovery-script", "./d.sh", "--mpi", "./t"}, "drop --mpi (gohorovodrun then uses --gloo)"},
		{[]string{"-np", "2", "--max-np", "4", "--mpi", "./t"}, "mpirun cannot re-form a running job"},
		{[]string{"-np", "2", "--min-np", "1", "--mpi-args=-v", "./t"}, "--mpi-args has no effect in elastic mode"},
		{[]string{"-np", "2", "--host-discovery-script", "./d.sh", "-H", "a:2", "./t"}, "--host-discovery-script and -H/--hosts both given"},
		{[]string{"-np", "2", "--host-discovery-script", "./d.sh", "--hostfile", "hf", "./t"}, "--host-discovery-script and --hostfile both given"},
		{[]string{"-np", "2", "--host-discovery-script=", "./t"}, "--host-discovery-script needs a SCRIPT"},
		{[]string{"-np", "2", "--slots-per-host", "2", "./t"}, "--slots-per-host is an elastic-mode flag"},
		{[]string{"-np", "2", "--reset-limit", "2", "./t"}, "--reset-limit is an elastic-mode flag"},
		{[]string{"-np", "2", "--elastic-timeout", "60", "./t"}, "--elastic-timeout is an elastic-mode flag"},
		{[]string{"-np", "2", "--blacklist-cooldown-range", "1", "2", "./t"}, "--blacklist-cooldown-range is an elastic-mode flag"},
		{[]string{"-np", "2", "--min-np", "1", "--slots-per-host", "2", "./t"}, "--slots-per-host applies to the hosts --host-discovery-script prints"},
		{[]string{"-np", "2", "--min-np=-1", "./t"}, "--min-np=-1 must be >= 0"},
		{[]string{"-np", "2", "--max-np=-1", "./t"}, "--max-np=-1 must be >= 0"},
		{[]string{"-np", "2", "--host-discovery-script", "./d.sh", "--slots-per-host=-1", "./t"}, "--slots-per-host=-1 must be >= 0"},
		{[]string{"-np", "2", "--min-np", "1", "--reset-limit=-1", "./t"}, "--reset-limit=-1 must be >= 0"},
		{[]string{"-np", "2", "--min-np", "0", "./t"}, "--min-np must be at least 1"},
		{[]string{"-np", "2", "--host-discovery-script", "./d.sh", "--slots-per-host", "0", "./t"}, "--slots-per-host must be at least 1"},
		{[]string{"-np", "2", "--min-np", "1", "--elastic-timeout", "0", "./t"}, "--elastic-timeout=0 must be a positive number of seconds"},
		{[]string{"-np", "2", "--min-np", "1", "--elastic-timeout=-5", "./t"}, "--elastic-timeout=-5 must be a positive number of seconds"},
		{[]string{"-np", "2", "--min-np", "1", "--elastic-timeout=NaN", "./t"}, "--elastic-timeout=NaN must be a positive number"},
		{[]string{"-np", "2", "--min-np", "1", "--elastic-timeout=1e-12", "./t"}, "--elastic-timeout=1e-12 must be a positive number"},
		{[]string{"-np", "2", "--min-np", "1", "--elastic-timeout=1e300", "./t"}, "--elastic-timeout=1e+300 must be a positive number"},
		{[]string{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "1e-12", "1", "./t"}, "want 0 < MIN <= MAX"},
		{[]string{"-np", "2", "--min-np", "3", "./t"}, "--min-np 3 is more than -np 2"},
		{[]string{"-np", "4", "--max-np", "2", "./t"}, "--max-np 2 is less than -np 4"},
		{[]string{"-np", "4", "--min-np", "1", "--max-np", "0", "./t"}, "--max-np 0 is less than -np 4"},
		{[]string{"--min-np", "1", "./t"}, "elastic mode needs -np N"},
		{[]string{"--host-discovery-script", "./d.sh", "./t"}, "elastic mode needs -np N"},
		{[]string{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "0", "10", "./t"}, "--blacklist-cooldown-range 0 10: want 0 < MIN <= MAX seconds"},
		{[]string{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "20", "10", "./t"}, "--blacklist-cooldown-range 20 10: want 0 < MIN <= MAX"},
		{[]string{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range=-1,10", "./t"}, "want 0 < MIN <= MAX"},
		{[]string{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range=1,Inf", "./t"}, "want 0 < MIN <= MAX"},
		// A missing MAX does not take the program as MAX.
		{[]string{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "10", "./t"}, "want MIN MAX, two numbers of seconds"},
		{[]string{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "a", "b", "./t"}, "want MIN MAX, two numbers of seconds"},
		{[]string{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range=10", "./t"}, "want MIN MAX, two numbers of seconds"},
		{[]string{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range"}, "flag needs an argument"},
		{[]string{"-np", "2", "--min-np", "x", "./t"}, "invalid argument \"x\""},
	}
	for _, tt := range tests {
		_, err := Parse(tt.args, io.Discard)
		if err == nil || !IsUsage(err) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Parse(%q) error = %v, want a usage error containing %q", tt.args, err, tt.wantErr)
		}
	}
}

func TestElasticConfig(t *testing.T) {
	parse := func(args ...string) *Options {
		t.Helper()
		o, err := Parse(append(args, "./t"), io.Discard)
		if err != nil {
			t.Fatalf("Parse(%q): %v", args, err)
		}
		return o
	}
	o := parse("-np", "4", "--min-np", "2", "--max-np", "8", "--host-discovery-script", "./d.sh", "--slots-per-host", "2",
		"--elastic-timeout", "1.5", "--reset-limit", "3", "--blacklist-cooldown-range", "10", "100")
	got, err := o.ElasticConfig([]string{EnvElasticTimeout + "=99"})
	want := elastic.Config{NP: 4, MinNP: 2, MaxNP: 8, ElasticTimeout: 1500 * time.Millisecond, ResetLimit: 3,
		CooldownMin: 10 * time.Second, CooldownMax: 100 * time.Second, DiscoveryScript: "./d.sh"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ElasticConfig\n got %+v, %v\nwant %+v (the flag over %s)", got, err, want, EnvElasticTimeout)
	}

	o = parse("-np", "2", "--min-np", "1", "-H", "a:1,b:1")
	for _, tc := range []struct {
		environ []string
		want    time.Duration
	}{
		{nil, elastic.DefaultElasticTimeout},
		{[]string{"PATH=/bin", EnvElasticTimeout + "="}, elastic.DefaultElasticTimeout},
		{[]string{EnvElasticTimeout + "=30"}, 30 * time.Second},
		{[]string{EnvElasticTimeout + "=0.25"}, 250 * time.Millisecond},
	} {
		got, err := o.ElasticConfig(tc.environ)
		want := elastic.Config{NP: 2, MinNP: 1, ElasticTimeout: tc.want}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ElasticConfig(%q) = %+v, %v; want %+v", tc.environ, got, err, want)
		}
	}
	for _, v := range []string{"soon", "0", "-3", "NaN", "Inf", "1e-12", "1e300"} {
		_, err := o.ElasticConfig([]string{EnvElasticTimeout + "=" + v})
		if !IsUsage(err) || !strings.Contains(err.Error(), EnvElasticTimeout+"=\""+v+"\" must be a positive number of seconds") {
			t.Errorf("ElasticConfig(%s=%s) error = %v, want a usage error naming the variable", EnvElasticTimeout, v, err)
		}
	}
}

func TestElasticHelp(t *testing.T) {
	var out strings.Builder
	if _, err := Parse([]string{"--help"}, &out); err != pflag.ErrHelp {
		t.Fatalf("Parse(--help) = %v", err)
	}
	for _, want := range []string{"--host-discovery-script SCRIPT ", "--min-np N ", "--max-np N ", "--slots-per-host N ",
		"--elastic-timeout SECONDS ", "$HOROVOD_ELASTIC_TIMEOUT or 600", "--reset-limit N ", "--blacklist-cooldown-range MIN MAX "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
	if n := strings.Count(out.String(), "elastic mode: "); n != 7 {
		t.Errorf("--help marks %d flags as elastic-mode flags, want 7", n)
	}
}

// TestAutotuneNoiseRange: horovodrun refuses a Gaussian process noise
// outside [0, 1]; so does the launcher, before anything starts.
func TestAutotuneNoiseRange(t *testing.T) {
	o, err := Parse([]string{"-np", "2", "--autotune", "--autotune-gaussian-process-noise", "1.5", "prog"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.ApplyTo(config.Default()); err == nil || !strings.Contains(err.Error(), "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE") {
		t.Fatalf("noise 1.5: %v", err)
	}
}
