package fdlimit

import (
	"errors"
	"strings"
	"testing"
)

func TestPlan(t *testing.T) {
	cases := []struct {
		name      string
		need      uint64
		have      Limits
		soft      uint64
		raise     bool
		wantError bool
	}{
		{"enough already", 100, Limits{1024, 4096}, 1024, false, false},
		{"exactly enough", 1024 - Reserve, Limits{1024, 4096}, 1024, false, false},
		{"raised to the hard limit", 1024, Limits{1024, 524288}, 524288, true, false},
		{"hard limit just enough", 4096 - Reserve, Limits{1024, 4096}, 4096, true, false},
		{"unlimited hard", 100000, Limits{1024, Unlimited}, Unlimited, true, false},
		{"unlimited soft", 100000, Limits{Unlimited, Unlimited}, Unlimited, false, false},
		{"hard too low", 20000, Limits{1024, 4096}, 1024, false, true},
		{"one over", 4096 - Reserve + 1, Limits{4096, 4096}, 4096, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			soft, raise, err := Plan("a job of 600 workers", c.need, c.have)
			if (err != nil) != c.wantError || soft != c.soft || raise != c.raise {
				t.Fatalf("Plan(%d, %+v) = %d, %v, %v; want %d, %v, error %v", c.need, c.have, soft, raise, err, c.soft, c.raise, c.wantError)
			}
		})
	}
}

// The error of a hard limit too low names what needs the files, the
// need, both limits and the way to raise them.
func TestPlanErrorSaysHow(t *testing.T) {
	_, _, err := Plan("a job of 600 workers", 5000, Limits{1024, 4096})
	var le *LimitError
	if !errors.As(err, &le) {
		t.Fatalf("err = %v, want a *LimitError", err)
	}
	msg := err.Error()
	for _, want := range []string{"a job of 600 workers", "5064", "soft 1024", "hard 4096", "ulimit -Hn 5064", "RLIMIT_NOFILE"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
}

// Ensure leaves this process able to open what it asked for, and refuses
// a need beyond any limit.
func TestEnsure(t *testing.T) {
	got, err := Ensure("the test", 100)
	if err != nil {
		t.Fatal(err)
	}
	if got.Soft != Unlimited && got.Soft < 100+Reserve {
		t.Fatalf("soft limit %d after Ensure(100)", got.Soft)
	}
	if got.Hard == Unlimited {
		return
	}
	if _, err := Ensure("the test", got.Hard); err == nil {
		t.Fatalf("Ensure(%d) with hard limit %d: no error", got.Hard, got.Hard)
	}
}
