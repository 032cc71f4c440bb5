package runtime

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestDumpStacks(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(&buf).With().Int("rank", 3).Logger()
	started, block := make(chan struct{}), make(chan struct{})
	defer close(block)
	go parkedForDump(started, block)
	<-started
	dumpStacks(log, "the stall inspector is shutting the job down")
	var ev struct {
		Level, Message string
		Rank           *int
		Goroutines     int
	}
	if err := json.Unmarshal(buf.Bytes(), &ev); err != nil {
		t.Fatalf("not one JSON event: %v\n%s", err, buf.String())
	}
	if ev.Level != "error" || ev.Rank == nil || *ev.Rank != 3 || ev.Goroutines < 2 {
		t.Fatalf("event %+v", ev)
	}
	if !strings.HasPrefix(ev.Message, "the stall inspector is shutting the job down; goroutine stacks follow:\ngoroutine ") {
		t.Fatalf("message starts %q", ev.Message[:min(len(ev.Message), 200)])
	}
	// Every goroutine, not only this one.
	for _, fn := range []string{"TestDumpStacks", "parkedForDump"} {
		if !strings.Contains(ev.Message, fn) {
			t.Errorf("the dump lacks %s", fn)
		}
	}

	// Below error level, nothing is written (and no dump made).
	buf.Reset()
	dumpStacks(log.Level(zerolog.FatalLevel), "quiet")
	if buf.Len() != 0 {
		t.Fatalf("wrote %q", buf.String())
	}
}

func parkedForDump(started, block chan struct{}) {
	close(started)
	<-block
}

func TestAllStacksGrowsAndCuts(t *testing.T) {
	full, cut := allStacks(16, 64<<20)
	if cut || !strings.Contains(string(full), "TestAllStacksGrowsAndCuts") {
		t.Fatalf("grown from 16 bytes: cut %v, %d bytes:\n%s", cut, len(full), full)
	}
	part, cut := allStacks(16, 100)
	if !cut || len(part) != 100 || !strings.HasPrefix(string(full), string(part[:20])) {
		t.Fatalf("capped at 100 bytes: cut %v, %d bytes %q", cut, len(part), part)
	}
}
