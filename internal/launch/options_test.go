package launch

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

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
		{[]string{"-np", "0", "prog"}, "-np must be at least 1"},
		{[]string{"-np", "-2", "prog"}, "--num-proc=-2 must be >= 0"},
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
		"--hierarchical-allreduce", "--autotune", "--autotune-log-file", "at.csv", "--log-without-timestamp", "prog"}, io.Discard)
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
