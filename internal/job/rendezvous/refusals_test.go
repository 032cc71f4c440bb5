package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/secret"
)

// TestRefusalsRateLimited: a flood of connections with a wrong secret
// logs the first refusalBurst one by one, then summaries with the count,
// and every refusal is counted once.
func TestRefusalsRateLimited(t *testing.T) {
	oldBurst, oldEvery := refusalBurst, refusalEvery
	refusalBurst, refusalEvery = 3, 200*time.Millisecond
	defer func() { refusalBurst, refusalEvery = oldBurst, oldEvery }()

	expect := slots(t, "localhost:1")
	var mu sync.Mutex
	var lines []string
	s, addr := serve(t, newSecret(t), expect, func(f string, a ...any) {
		mu.Lock()
		lines = append(lines, fmt.Sprintf(f, a...))
		mu.Unlock()
	})
	const n = 40
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		if _, err := Join(ctx, addr, newSecret(t), Member{Slot: expect[0]}); !errors.Is(err, secret.ErrRefused) {
			t.Fatalf("Join %d with a wrong secret = %v, want secret.ErrRefused", i, err)
		}
	}
	s.Close() // sums up what is counted
	mu.Lock()
	defer mu.Unlock()
	single, summed, summaries := 0, 0, 0
	for _, l := range lines {
		var k int
		switch {
		case strings.HasPrefix(l, "rendezvous: refused a connection"):
			single++
		case strings.Contains(l, "more connections"):
			if _, err := fmt.Sscanf(l, "rendezvous: refused %d more", &k); err != nil {
				t.Fatalf("summary %q: %v", l, err)
			}
			summed += k
			summaries++
		}
	}
	if single != refusalBurst || single+summed != n {
		t.Errorf("%d lines one by one and %d refusals summed up in %d lines, want %d and %d:\n%s",
			single, summed, summaries, refusalBurst, n-refusalBurst, strings.Join(lines, "\n"))
	}
	if len(lines) > refusalBurst+1+summaries || summaries == 0 {
		t.Errorf("%d lines for %d refusals:\n%s", len(lines), n, strings.Join(lines, "\n"))
	}
}
