package runtime

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/tensor"
)

// logSink is a log writer that the ranks of a local group share.
type logSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// events decodes the JSON events written so far.
func (s *logSink) events(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	sc.Buffer(nil, 256<<20)
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("log line is not JSON: %v: %q", err, sc.Text())
		}
		out = append(out, ev)
	}
	return out
}

// find returns the first event of rank at level whose message contains
// every one of want.
func find(evs []map[string]any, rank int, level string, want ...string) map[string]any {
	for _, ev := range evs {
		msg, _ := ev["message"].(string)
		if r, ok := ev["rank"].(float64); !ok || int(r) != rank || ev["level"] != level {
			continue
		}
		all := true
		for _, w := range want {
			all = all && strings.Contains(msg, w)
		}
		if all {
			return ev
		}
	}
	return nil
}

// The two lines of a stall where rank 0 submitted allreduce "a" and rank 1
// allreduce "b".
var differLines = []string{
	"rank 0 submitted allreduce.a but never allreduce.b: do the names differ across ranks",
	"rank 1 submitted allreduce.b but never allreduce.a: do the names differ across ranks",
}

// TestStallDiagnosisLogged runs the inspector on the real clock (the stall
// time is the shortest that keeps the test quick, a few cycles of 1 ms):
// rank 0 submits "a" and rank 1 "b", and the warning says the names differ.
func TestStallDiagnosisLogged(t *testing.T) {
	cfg := testConfig()
	cfg.StallCheckTime = 20 * time.Millisecond
	var logs logSink
	handles := make([]*Handle, 2)
	err := RunLocal(2, func(r *Runtime, rank int) error {
		h, err := r.AllreduceAsync(fill(tensor.Float32, 1, 1), []string{"a", "b"}[rank], Sum)
		if err != nil {
			return err
		}
		handles[rank] = h
		if rank != 0 {
			return nil
		}
		// The first report may come when only one name has waited long
		// enough; a later one has both lines.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if find(logs.events(t), 0, "warn", differLines...) != nil {
				return nil
			}
			if time.Now().After(deadline) {
				return errors.New("no warning with both diagnosis lines")
			}
		}
	}, WithConfig(cfg), WithLogger(zerolog.New(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	ev := find(logs.events(t), 0, "warn", differLines...)
	if msg := ev["message"].(string); !strings.HasPrefix(msg, "One or more tensors were submitted to be reduced") ||
		!strings.Contains(msg, "\nMissing ranks:\n0: [allreduce.b]\n1: [allreduce.a]\n") {
		t.Errorf("warning %q", msg)
	}
	// A warning shuts nothing down: the handles fail only with the
	// shutdown that RunLocal asked for, with no stall as the cause.
	for rank, h := range handles {
		if err := h.Wait(ctxT(t)); !errors.Is(err, ErrShutdown) || strings.Contains(err.Error(), "stall") {
			t.Errorf("rank %d: %v", rank, err)
		}
	}
}

// TestStallShutdownDumpsStacks: with a shutdown time, the stall stops every
// rank, rank 0's pending handle fails naming the stall and its diagnosis,
// and rank 0 logs its goroutine stacks before its loop exits.
func TestStallShutdownDumpsStacks(t *testing.T) {
	cfg := testConfig()
	cfg.StallCheckTime = 20 * time.Millisecond
	cfg.StallShutdownTime = 40 * time.Millisecond
	var logs logSink
	err := RunLocal(2, func(r *Runtime, rank int) error {
		h, err := r.AllreduceAsync(fill(tensor.Float32, 1, 1), []string{"a", "b"}[rank], Sum)
		if err != nil {
			return err
		}
		err = h.Wait(ctxT(t))
		if !errors.Is(err, ErrShutdown) {
			return fmt.Errorf("handle: %v", err)
		}
		// Rank 0's handle names the stall; what rank 1 learns of the
		// cause is the farewell's business, not this test's.
		if rank == 0 && (!strings.Contains(err.Error(), "hvd: stall inspector: ") ||
			!strings.Contains(err.Error(), "Will shutdown.") || !strings.Contains(err.Error(), differLines[1])) {
			return fmt.Errorf("handle: %v", err)
		}
		return nil
	}, WithConfig(cfg), WithLogger(zerolog.New(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	evs := logs.events(t)
	if find(evs, 0, "error", "Will shutdown.", differLines[1]) == nil {
		t.Error("no stall report at error level")
	}
	dump := find(evs, 0, "error", "the stall inspector is shutting the job down; goroutine stacks follow:\ngoroutine ")
	if dump == nil {
		t.Fatal("rank 0 logged no goroutine dump")
	}
	if msg := dump["message"].(string); !strings.Contains(msg, "(*loop).run") || !strings.Contains(msg, "TestStallShutdownDumpsStacks") {
		t.Errorf("the dump lacks the loop or the test's goroutine:\n%s", msg)
	}
}

// TestStallDiagnosisSeesCachedWork: rank 2 never submits "a" but keeps
// making a cached allreduce with the others. Cached cycles send no request
// lists; the coordinator learns from them (cycle.Negotiation.CachedProgress) that rank 2
// is active, so the report says it skips "a" rather than that it is silent.
func TestStallDiagnosisSeesCachedWork(t *testing.T) {
	cfg := testConfig()
	cfg.StallCheckTime = 20 * time.Millisecond
	// The cached steps stay negotiated cycles: on a locked static schedule
	// no cycle runs the stall inspection (it comes back when the schedule
	// dissolves), and the test waited out its 20 s deadline every time.
	cfg.StaticSchedule = 0
	var logs logSink
	const active = "rank 2 kept submitting other requests (the last "
	err := RunLocal(3, func(r *Runtime, rank int) error {
		// Once negotiated, "step" is cached: later steps are fast-path
		// cycles only.
		if _, err := r.Allreduce(ctxT(t), fill(tensor.Float32, 1, 0), "step", Sum); err != nil {
			return err
		}
		if rank < 2 {
			if _, err := r.AllreduceAsync(fill(tensor.Float32, 1, 1), "a", Sum); err != nil {
				return err
			}
		}
		// Every rank steps until rank 0 has seen the report (or gives up):
		// the step's sum tells all ranks at once.
		deadline := time.Now().Add(20 * time.Second)
		for {
			stop := 0.0
			if rank == 0 && (find(logs.events(t), 0, "warn", active) != nil || time.Now().After(deadline)) {
				stop = 1
			}
			out, err := r.Allreduce(ctxT(t), fill(tensor.Float32, 1, stop), "step", Sum)
			if err != nil {
				return err
			}
			if first(out) > 0 {
				return nil
			}
		}
	}, WithConfig(cfg), WithLogger(zerolog.New(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	evs := logs.events(t)
	if ev := find(evs, 0, "warn", active, "ago) but never allreduce.a: does it skip this collective"); ev == nil {
		t.Fatal("no report that rank 2 is active but skips allreduce.a")
	}
	// Once rank 2's cached steps have reached the coordinator, no later
	// report calls it silent. (A report before its first cached step, on
	// a loaded machine, may: it had indeed done nothing yet.)
	seenActive := false
	for _, ev := range evs {
		msg, _ := ev["message"].(string)
		if r, _ := ev["rank"].(float64); int(r) != 0 || ev["level"] != "warn" {
			continue
		}
		if strings.Contains(msg, active) {
			seenActive = true
		} else if seenActive && strings.Contains(msg, "rank 2 submitted nothing") {
			t.Errorf("rank 2 called silent after its cached allreduces were seen: %q", msg)
		}
	}
}
