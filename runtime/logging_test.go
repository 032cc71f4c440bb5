package runtime

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// logBuffer collects the JSON lines of several ranks' loggers.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the decoded lines whose message is msg.
func (b *logBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["message"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// logSteps runs, on 2 ranks over the in-memory transport with a JSON
// logger at level, a fused grouped allreduce (negotiated, then cached), a name
// submitted with different shapes (a negotiation error), the fused name
// again with a changed shape (a cache invalidation), and enough new names
// to evict from the cache.
func logSteps(t *testing.T, level zerolog.Level) *logBuffer {
	t.Helper()
	var buf logBuffer
	runLogSteps(t, zerolog.New(&buf).Level(level))
	return &buf
}

func runLogSteps(t *testing.T, log zerolog.Logger) {
	t.Helper()
	cfg := testConfig()
	cfg.CacheCapacity = 4
	c := startClusterWith(t, 2, WithConfig(cfg), WithLogger(log))
	ctx := ctxT(t)
	c.each(t, func(r *Runtime, rank int) error {
		ts := []*tensor.Tensor{fill(tensor.Float32, 8, 1), fill(tensor.Float32, 8, 1), fill(tensor.Float32, 8, 1)}
		for range 2 {
			if _, err := r.GroupedAllreduce(ctx, ts, "grad", Sum); err != nil {
				return err
			}
		}
		if _, err := r.Allreduce(ctx, fill(tensor.Float32, 2+rank, 1), "odd", Sum); err == nil {
			t.Errorf("rank %d: allreduce of different shapes succeeded", rank)
		}
		ts[0] = fill(tensor.Float32, 16, 1)
		if _, err := r.GroupedAllreduce(ctx, ts, "grad", Sum); err != nil {
			return err
		}
		_, err := r.GroupedAllreduce(ctx, ts, "more", Sum)
		return err
	})
}

func TestDebugLog(t *testing.T) {
	buf := logSteps(t, zerolog.DebugLevel)
	neg := buf.lines(t, "negotiated")
	if len(neg) == 0 {
		t.Fatal("no negotiated line at debug")
	}
	var sawFused, sawError bool
	for _, m := range neg {
		if m["sent"].(float64) == 0 && m["responses"].(float64) == 0 && m["shutdown"] == false {
			t.Errorf("an empty negotiation logged at debug (trace only): %v", m)
		}
		for _, d := range m["list"].([]any) {
			s := d.(string)
			sawFused = sawFused || strings.HasPrefix(s, "ALLREDUCE float32 [") && strings.Contains(s, "grad")
			sawError = sawError || strings.HasPrefix(s, "ERROR [") && strings.Contains(s, "odd") &&
				strings.Contains(s, "Mismatched")
		}
	}
	if !sawFused || !sawError {
		t.Errorf("negotiated lines list no grad allreduce (%v) or no odd error (%v): %v", sawFused, sawError, neg)
	}
	plans := buf.lines(t, "fusion plan")
	fusedPlan := false
	for _, m := range plans {
		if m["responses"].(float64) == 3 && m["collectives"].(float64) == 1 && m["fused_tensors"].(float64) == 3 &&
			m["fused_bytes"].(float64) == 3*8*4 {
			fusedPlan = true
		}
	}
	if !fusedPlan {
		t.Errorf("no fusion plan of 3 responses into 1 collective of 96 bytes: %v", plans)
	}
	fused := buf.lines(t, "fused allreduce")
	if len(fused) == 0 {
		t.Fatal("no fused allreduce line at debug")
	}
	if m := fused[0]; m["tensors"].(float64) != 3 || m["bytes"].(float64) != 96 || m["copied"].(float64) != 96 ||
		m["in_place"].(float64) != 0 {
		t.Errorf("fused allreduce line %v, want 3 tensors, 96 bytes, all copied", m)
	}
	if inv := buf.lines(t, "response cache: parameters changed, entries erased on every rank"); len(inv) == 0 ||
		!strings.Contains(inv[0]["names"].(string), "grad") {
		t.Errorf("no cache invalidation line naming grad: %v", inv)
	}
	if ev := buf.lines(t, "response cache full: least recently used responses evicted"); len(ev) == 0 {
		t.Error("no cache eviction line")
	}
	// Horovod's warning, once per rank, naming the capacity configured (4).
	want := "A response has been evicted from cache which may indicate reduced performance. Better performance may be obtained " +
		"by disabling caching (HOROVOD_CACHE_CAPACITY=0) or increasing the cache capacity (HOROVOD_CACHE_CAPACITY>4)."
	if n := len(buf.lines(t, want)); n != 2 {
		t.Errorf("%d lines of Horovod's eviction warning with capacity 4, want one per rank", n)
	}
	for _, msg := range []string{"cycle start", "cycle agreed", "performing"} {
		if n := len(buf.lines(t, msg)); n != 0 {
			t.Errorf("%d %q lines at debug, want them at trace only", n, msg)
		}
	}
}

func TestTraceLog(t *testing.T) {
	buf := logSteps(t, zerolog.TraceLevel)
	for _, msg := range []string{"cycle start", "cycle agreed", "performing", "negotiated"} {
		if len(buf.lines(t, msg)) == 0 {
			t.Errorf("no %q line at trace", msg)
		}
	}
	agreed := buf.lines(t, "cycle agreed")
	cached := false
	for _, m := range agreed {
		if !regexp.MustCompile(`^\[0x[0-9a-f]+`).MatchString(m["agreed"].(string)) {
			t.Fatalf("agreement words %q, want hex", m["agreed"])
		}
		cached = cached || m["cached"].(float64) == 3 && m["negotiate"] == false
	}
	if !cached {
		t.Error("no cycle agreed on 3 cached responses without negotiation (the second step)")
	}
}

func TestLogQuietAtInfo(t *testing.T) {
	buf := logSteps(t, zerolog.InfoLevel)
	for _, msg := range []string{"negotiated", "fusion plan", "fused allreduce", "cycle agreed"} {
		if n := len(buf.lines(t, msg)); n != 0 {
			t.Errorf("%d %q lines at info", n, msg)
		}
	}
}

func TestConsoleLoggerTimestamp(t *testing.T) {
	cfg := config.Default()
	cfg.LogLevel = config.LevelInfo
	var buf bytes.Buffer
	log := consoleLogger(&buf, cfg, 3)
	before := time.Now()
	log.Info().Msg("hello")
	log.Debug().Msg("hidden")
	line := strings.TrimSpace(buf.String())
	m := regexp.MustCompile(`^(\S+) INF hello rank=3$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("line %q, want <time> INF hello rank=3 (and no debug line)", buf.String())
	}
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)$`).MatchString(m[1]) {
		t.Fatalf("timestamp %q is not RFC 3339 with milliseconds", m[1])
	}
	ts, err := time.Parse(time.RFC3339, m[1])
	if err != nil {
		t.Fatal(err)
	}
	if d := ts.Sub(before); d < -time.Millisecond || d > time.Minute {
		t.Errorf("timestamp %v is %v from the time of logging", ts, d)
	}

	buf.Reset()
	cfg.LogHideTime = true
	log = consoleLogger(&buf, cfg, 0)
	log.Warn().Msg("no time")
	if got := strings.TrimSpace(buf.String()); got != "WRN no time rank=0" {
		t.Errorf("with HOROVOD_LOG_HIDE_TIME: %q, want %q", got, "WRN no time rank=0")
	}
}
